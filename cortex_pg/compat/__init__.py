"""Drop-in facades of other memory APIs over the one store: Prem Cortex (prem), calute (calute)."""
