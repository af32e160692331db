"""Issue 35, acceptance 6: `up`'s reported phase times keep every phase that ran, `rendezvous` twice (the
head listening, then the peers joined) included."""

from __future__ import annotations

from orchestrator.cli.deploy_cmds import _up_and_report
from orchestrator.deploy.up import UpResult
from orchestrator.runner.events import Events, Kind, Phase


class Seen:
    def __init__(self):
        self.events = []

    def handle(self, event) -> None:
        self.events.append(event)

    def close(self) -> None:
        pass


def test_up_reports_both_rendezvous_phases():
    seen = Seen()
    events = Events(seen)
    for phase in (Phase.HEAD, Phase.RENDEZVOUS, Phase.PEERS, Phase.RENDEZVOUS, Phase.READY):
        with events.phase(phase):
            pass

    _up_and_report(lambda: UpResult("http://head:8000", "m", "abc", "run"), events, as_json=True)

    result = next(e for e in seen.events if e.kind is Kind.RESULT)
    assert list(result.data["phases"]) == ["head", "rendezvous", "peers", "rendezvous #2", "ready"]


def test_timings_number_each_repeat_of_a_phase():
    events = Events()
    for phase in (Phase.RENDEZVOUS, Phase.RENDEZVOUS, Phase.RENDEZVOUS):
        with events.phase(phase):
            pass
    assert list(events.timings()) == ["rendezvous", "rendezvous #2", "rendezvous #3"]
    assert all(seconds >= 0 for seconds in events.timings().values())
