"""Request traces, prompt datasets and arrival processes of ``pytimings loadgen``."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from pytimings.errors import UsageError
from pytimings.serving import workload


def test_the_three_trace_layouts_read_to_the_same_requests(tmp_path: Path) -> None:
    plain = tmp_path / "plain.jsonl"
    plain.write_text(
        '{"timestamp": 10.0, "input_len": 100, "output_len": 5}\n\n'
        '{"timestamp": 10.25, "input_len": 7, "output_len": 300}\n'
    )
    mooncake = tmp_path / "mooncake.jsonl"
    mooncake.write_text(
        '{"timestamp": 27000, "input_length": 100, "output_length": 5, "hash_ids": [1, 2]}\n'
        '{"timestamp": 27250, "input_length": 7, "output_length": 300, "hash_ids": [3]}\n'
    )
    azure = tmp_path / "azure.csv"
    azure.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:15:59.9000000,100,5\n"
        "2023-11-16 18:16:00.1500000,7,300\n"  # across a second: 0.25 s later
    )
    for path, fmt in ((plain, "jsonl"), (mooncake, "mooncake"), (azure, "azure_csv")):
        trace = workload.read_trace(str(path))
        assert trace.format == fmt
        assert trace.arrival_s == pytest.approx((0.0, 0.25), abs=1e-9)
        assert trace.input_len == (100, 7) and trace.output_len == (5, 300)


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ('{"timestamp": 1, "input_len": 3}\n', ":1: no output_len"),
        ('{"timestamp": 1, "input_len": 3, "output_len": 0}\n', ":1: output_len 0 is out"),
        ('{"timestamp": 1, "input_len": 2.5, "output_len": 1}\n', "not a token count"),
        ('{"timestamp": "x", "input_len": 2, "output_len": 1}\n', "timestamp is not a number"),
        ('{"timestamp": 2, "input_len": 2, "output_len": 1}\n{"timestamp": 1, "input_len": 2, '
         '"output_len": 1}\n', "row 2 goes back in time"),
        ("{oops\n", ":1: not JSON"),
        ("a,b,c\n1,2,3\n", "neither JSONL nor the Azure CSV"),
        ("TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,1,1\n", ":2: TIMESTAMP"),
        ("", "no requests"),
    ],
)  # fmt: skip
def test_a_bad_trace_is_one_line_naming_the_file(tmp_path: Path, text: str, said: str) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(text)
    with pytest.raises(UsageError, match=r"--trace .*t\.jsonl") as err:
        workload.read_trace(str(path))
    assert said in str(err.value)


def test_dataset_prompts_are_first_user_turns_and_the_rest_counted(tmp_path: Path) -> None:
    entries = [
        {"id": "a", "conversations": [{"from": "human", "value": "hello"},
                                      {"from": "gpt", "value": "hi"}]},
        {"id": "b", "conversations": [{"from": "gpt", "value": "starts with the model"}]},
        {"id": "c", "conversations": []},
        {"messages": [{"role": "user", "content": "openai style"}]},
        {"prompt": "plain"},
    ]  # fmt: skip
    as_json = tmp_path / "d.json"
    as_json.write_text(json.dumps(entries))
    as_jsonl = tmp_path / "d.jsonl"
    as_jsonl.write_text("".join(json.dumps(e) + "\n" for e in entries))
    for path in (as_json, as_jsonl):
        ds = workload.read_dataset(str(path))
        assert ds.prompts == ("hello", "openai style", "plain") and ds.skipped == 2
    none = tmp_path / "none.json"
    none.write_text(json.dumps(entries[1:3]))
    with pytest.raises(UsageError, match="none of its 2 entries"):
        workload.read_dataset(str(none))


def _gaps(process: str, rate: float, burstiness: float = 1.0, n: int = 20000) -> np.ndarray:
    due = workload.arrivals(process, rate, burstiness, 0.0, np.random.default_rng(1))
    times = np.array([next(due) for _ in range(n)])
    assert times[0] == 0.0
    return np.diff(times)


def test_arrival_processes_have_their_rate_and_spread() -> None:
    assert np.allclose(_gaps("constant", 50.0), 0.02)
    poisson = _gaps("poisson", 50.0)
    assert poisson.mean() == pytest.approx(0.02, rel=0.03)
    assert (poisson.std() / poisson.mean()) ** 2 == pytest.approx(1.0, rel=0.06)
    for shape in (0.25, 4.0):  # gamma: squared coefficient of variation 1 / shape
        gaps = _gaps("gamma", 50.0, shape)
        assert gaps.mean() == pytest.approx(0.02, rel=0.05)
        assert (gaps.std() / gaps.mean()) ** 2 == pytest.approx(1 / shape, rel=0.1)


def test_a_ramp_rises_linearly_to_the_rate() -> None:
    rate, ramp = 100.0, 2.0
    due = workload.arrivals("constant", rate, 1.0, ramp, np.random.default_rng(0))
    times = np.array([next(due) for _ in range(1000)])
    # arrivals by time t: R t^2 / (2T) during the ramp (100 by 2 s), then R per second
    for t in (0.5, 1.0, 2.0, 5.0):
        expected = rate * t * t / (2 * ramp) if t <= ramp else rate * (ramp / 2 + t - ramp)
        assert np.searchsorted(times, t, side="right") == pytest.approx(expected, abs=1.01)
    assert np.allclose(np.diff(times[times > ramp]), 1 / rate)
