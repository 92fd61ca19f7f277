"""The backoff scheduler (egg's, as TENSAT ran): bans, discarded matches found again, saturation
only once no rule is banned, state kept for a continued exploration, bad settings refused."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from test_explore import EXPLODING, sum_chain

from relsat import Options, models, optimize
from relsat.cli import main
from relsat.engine.egraph import EGraph
from relsat.engine.explore import (
    Backoff,
    Exploration,
    Limits,
    Schedule,
    StopReason,
    explore,
)
from relsat.errors import SettingsError
from relsat.rewrite.rulefile import load_rules

RULES = load_rules()


def _bans(eg: EGraph) -> dict[str, tuple]:
    rows = eg.db.execute("SELECT rule, since, banned_until, times_banned FROM rule_sched")
    return {r[0]: r[1:] for r in rows}


@pytest.fixture(scope="module")
def bert_simple() -> Iterator[tuple[EGraph, Exploration]]:
    """BERT explored to saturation applying every match (read only: tests compare with it)."""
    eg = EGraph.from_graph(models.load("bert"))
    yield eg, explore(eg, RULES)
    eg.close()


@pytest.fixture(scope="module")
def bert_backoff() -> Iterator[tuple[EGraph, Exploration]]:
    """BERT explored to saturation under the backoff scheduler with egg's defaults (read only)."""
    eg = EGraph.from_graph(models.load("bert"))
    yield eg, explore(eg, RULES, schedule=Schedule(scheduler="backoff"))
    eg.close()


@pytest.fixture(scope="module")
def nasrnn_counts() -> tuple:
    """NASRNN's e-graph counts at saturation, every match applied."""
    whole = EGraph.from_graph(models.load("nasrnn"))
    explore(whole, RULES)
    counts = whole.counts()
    whole.close()
    return counts


def test_simple_applies_every_match_and_bans_nothing(bert_simple) -> None:  # type: ignore[no-untyped-def]
    eg, result = bert_simple
    assert result.stop is StopReason.SATURATED
    assert not any(s.banned for s in result.iterations) and not _bans(eg)


def test_backoff_bans_busy_rules_and_still_reaches_the_saturated_egraph(  # type: ignore[no-untyped-def]
    bert_simple, bert_backoff
) -> None:
    """BERT has phases of 2,780 and 5,620 new matches: with egg's defaults the busiest rules are
    banned, their matches discarded and found again when the ban ends, so the saturated e-graph
    is the one every match gives, reached in more iterations."""
    simple, plain = bert_simple
    eg, result = bert_backoff
    assert result.stop is StopReason.SATURATED
    banned = sum(s.banned for s in result.iterations)
    assert banned > 0
    assert banned == eg.db.scalar("SELECT sum(banned) FROM rule_stats")
    bans = _bans(eg)
    assert bans and all(times >= 1 for _, _, times in bans.values())
    assert all(since is None for since, _, _ in bans.values())  # all searched again since
    assert len({s.iteration for s in result.iterations}) > len(
        {s.iteration for s in plain.iterations}
    )
    assert eg.counts() == simple.counts()
    for s in result.iterations:
        assert s.matches == s.applied + s.rejected + s.rejected_cycle + s.capped + s.banned
    assert not any(eg.audit().values())


def test_a_banned_rule_is_not_searched_until_its_ban_ends_or_is_lifted(bert_backoff) -> None:  # type: ignore[no-untyped-def]
    """Every ban in BERT's exploration (egg's defaults): the banned rule is next searched when
    its ban (5 iterations, doubled per earlier ban) ends, or earlier only right after an
    iteration that changed nothing (egg moves the bans forward instead of stopping there)."""
    eg, result = bert_backoff
    idle = {
        it
        for it in {s.iteration for s in result.iterations}
        if not any(s.changed for s in result.iterations if s.iteration == it)
    }
    rows = eg.db.execute("SELECT rule, iteration, banned FROM rule_stats ORDER BY iteration")
    bans = [(r, i) for r, i, banned in rows if banned]
    assert len(bans) >= 3 and min(i for _, i in bans) >= 1  # iteration 0 is never limited
    for rule, i in bans:
        before = sum(1 for r, j in bans if r == rule and j < i)
        until = i + (5 << before)
        after = [j for r, j, _ in rows if r == rule and j > i]
        if after:
            nxt = after[0]
            assert nxt == until or (nxt < until and nxt - 1 in idle), (rule, i, nxt, until)


@pytest.mark.parametrize("ban_length", [1, 3])
def test_discarded_matches_are_found_again(ban_length: int, nasrnn_counts: tuple) -> None:
    """With a match limit of 1 nearly every rule is banned at some point; the e-graph still
    saturates to exactly what applying every match gives (the semi-naive search of a rule
    coming off a ban starts where its banned search started)."""
    eg = EGraph.from_graph(models.load("nasrnn"))
    result = explore(
        eg,
        RULES,
        limits=Limits(iterations=200),
        schedule=Schedule(scheduler=Backoff(1, ban_length)),
    )
    assert result.stop is StopReason.SATURATED
    assert sum(s.banned for s in result.iterations) > 0
    assert eg.counts() == nasrnn_counts
    assert not any(eg.audit().values())


def test_a_continued_exploration_keeps_the_bans(bert_backoff) -> None:  # type: ignore[no-untyped-def]
    """Stopped by the iteration limit while a rule is banned, then continued: the same phases
    and e-graph as one run (the stored ban and the rule's own semi-naive start hold)."""
    one, _ = bert_backoff
    eg = EGraph.from_graph(models.load("bert"))
    first = explore(eg, RULES, limits=Limits(iterations=3), schedule=Schedule(scheduler="backoff"))
    assert first.stop is StopReason.ITERATION_LIMIT
    assert any(until > 3 and since is not None for since, until, _ in _bans(eg).values())
    again = explore(eg, RULES, schedule=Schedule(scheduler="backoff"))
    assert again.stop is StopReason.SATURATED
    cols = "iteration, phase, matches, applied, banned, new_enodes, merged, enodes"
    assert eg.sql(f"SELECT {cols} FROM iteration_stats ORDER BY epoch").equals(
        one.sql(f"SELECT {cols} FROM iteration_stats ORDER BY epoch")
    )
    assert eg.counts() == one.counts()


def test_continuing_without_the_scheduler_still_finds_the_discarded_matches(bert_simple) -> None:  # type: ignore[no-untyped-def]
    eg = EGraph.from_graph(models.load("bert"))
    explore(eg, RULES, limits=Limits(iterations=4), schedule=Schedule(scheduler="backoff"))
    assert any(since is not None for since, _, _ in _bans(eg).values())
    explore(eg, RULES, limits=Limits(iterations=100))
    assert eg.counts() == bert_simple[0].counts()


def test_an_exploding_rule_set_under_backoff_holds_the_node_limit() -> None:
    eg = sum_chain(12)
    result = explore(
        eg,
        list(EXPLODING),
        limits=Limits(nodes=3000, iterations=1000),
        schedule=Schedule(scheduler="backoff"),
    )
    assert result.stop is StopReason.NODE_LIMIT
    assert result.enodes <= 3000
    assert result.busiest and "busiest rules: " in result.why
    assert not any(eg.audit().values())


def test_the_time_limit_passing_at_the_saturation_check_is_a_stop_reason(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """At saturation the scheduler moves its bans forward in one statement; when the time limit
    passes right there, the run stops with `time limit` (it escaped as DeadlinePassed)."""
    import relsat.engine.phase as ph

    real = ph.Phases.lift_bans

    def late(self, iteration):  # type: ignore[no-untyped-def]
        self.db._expired.set()  # the deadline passes now
        return real(self, iteration)

    monkeypatch.setattr(ph.Phases, "lift_bans", late)
    eg = EGraph.from_graph(models.load("nasrnn"))
    result = explore(eg, RULES, limits=Limits(seconds=600), schedule=Schedule(scheduler="backoff"))
    assert result.stop is StopReason.TIME_LIMIT
    assert not any(eg.audit().values())


@pytest.mark.parametrize(
    "scheduler",
    ["egg", "", None, 1, "Backoff"],
)
def test_a_bad_scheduler_is_refused(scheduler: object) -> None:
    eg = EGraph.from_graph(models.load("vgg19"))
    with pytest.raises(SettingsError, match="scheduler"):
        explore(eg, RULES, schedule=Schedule(scheduler=scheduler))  # type: ignore[arg-type]
    with pytest.raises(SettingsError, match="scheduler"):
        optimize(models.load("vgg19"), Options(scheduler=scheduler))  # type: ignore[arg-type]
    assert eg.db.scalar("SELECT count(*) FROM iteration_stats") == 0


@pytest.mark.parametrize(
    ("kwargs", "option"),
    [
        ({"match_limit": 0}, "match_limit"),
        ({"ban_length": 0}, "ban_length"),
        ({"match_limit": 2.5}, "match_limit"),
        ({"ban_length": True}, "ban_length"),
    ],
)
def test_bad_backoff_settings_are_refused(kwargs: dict, option: str) -> None:
    with pytest.raises(SettingsError, match=option):
        Backoff(**kwargs)


def test_cli_scheduler_option(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:  # type: ignore[no-untyped-def]
    db = tmp_path / "bert.duckdb"
    args = ["optimize", "--model", "bert", "--scheduler", "backoff", "--db", str(db)]
    # three iterations hold BERT's first ban (the run to saturation is the fixtures' above)
    code = main([*args, "--no-verify", "--extractor", "greedy", "--iterations", "3"])
    out = capsys.readouterr().out
    assert code == 0
    assert "backoff:" in out and "matches of banned rules discarded" in out
    assert main(["inspect", str(db)]) == 0
    out = capsys.readouterr().out
    assert "backoff scheduler: rules banned" in out and "matmul-assoc-right" in out
    with pytest.raises(SystemExit) as exc:
        main(["optimize", "--model", "bert", "--scheduler", "fast"])
    assert exc.value.code == 2
