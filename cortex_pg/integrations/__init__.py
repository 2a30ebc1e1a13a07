"""Reaching the store from agent frameworks: LangChain tools (:mod:`.langchain`, extra
``langchain``) and an MCP server (:mod:`.mcp`, extra ``mcp``), both over one
:class:`~cortex_pg.integrations.toolkit.Toolkit` whose argument models live in
:mod:`.schemas`."""
