"""The registry of embedded servers this user started, and the one INFO line saying where data lives."""

from __future__ import annotations

import logging
import os

from cortex_pg.db import embedded


def test_a_data_dir_is_announced_once_and_recorded_once(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("CORTEX_PG_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setattr(embedded, "_announced", set())
    home = tmp_path / "home"
    with caplog.at_level(logging.INFO, logger="cortex_pg.db.embedded"):
        embedded._remember(home)
        embedded._remember(home)
    lines = [r.getMessage() for r in caplog.records if r.name == "cortex_pg.db.embedded"]
    assert len(lines) == 1 and str(home) in lines[0] and "keeps running" in lines[0]
    assert embedded.registry_path() == tmp_path / "state" / "servers"
    assert embedded.registered() == [home]


def test_stop_all_forgets_directories_that_are_gone(tmp_path, monkeypatch):
    monkeypatch.setenv("CORTEX_PG_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setattr(embedded, "_announced", set())
    gone, stopped = tmp_path / "gone", tmp_path / "stopped"
    (stopped / "pgdata").mkdir(parents=True)  # a data directory whose server is not running
    embedded._remember(gone)
    embedded._remember(stopped)
    assert embedded.stop_all() == [(stopped, False)]
    assert embedded.registered() == [stopped]


def test_the_wait_for_a_crashed_postmaster_passes_over_other_pid_files(tmp_path):
    # start() first waits while postmaster.pid names a dead, unreaped server; a pid file of
    # initdb's standalone backend (a negative pid), of a live process, or none, is no such
    # server: the wait returns at once instead of failing or waiting its 30 seconds
    pgdata = tmp_path / "pgdata"
    pgdata.mkdir()
    embedded._wait_until_reaped(tmp_path, wait_s=0.0)  # no pid file
    for first_line in ("-2716", str(os.getpid()), "not a pid", ""):
        (pgdata / "postmaster.pid").write_text(first_line + "\n/some/dir\n")
        embedded._wait_until_reaped(tmp_path, wait_s=30.0)
