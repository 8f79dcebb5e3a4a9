"""Every file gpulens reads: values no GPU can report refused with file, line and column; other tools'
quirks (a byte-order mark, native Parquet times) read; memory bounded per line."""

import os
import pty
import stat
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from gpulens.analyzer.inputs import frame as fr
from gpulens.analyzer.inputs import readers
from gpulens.analyzer.inputs.readers import TraceError, read_trace
from tests.captures import FIXTURES
from tests.helpers import REPO

HEADER = "timestamp,gpu,gpu_util,memory_used_bytes,memory_total_bytes,power_watts\n"


def refused(path) -> TraceError:
    with pytest.raises(TraceError) as error:
        readers.read_files([path])
    return error.value


@pytest.mark.parametrize(
    "rows, where, problem",
    [
        ("inf,0,0.5,1,2,100\n", "line 2, column 1 (timestamp)", "inf is not a time from 1970 to 9999"),
        ("1e300,0,0.5,1,2,100\n", "line 2, column 1 (timestamp)", "1e+300 is not a time from 1970 to 9999"),
        ("1,0,0.5,1,2,100\n-5,0,0.5,1,2,100\n", "line 3, column 1 (timestamp)", "-5 is not a time from 1970"),
        ("1,0,-0.01,1,2,100\n", "line 2, column 3 (gpu_util)", "-0.01 is not a ratio from 0 to 1"),
        ("1,0,0.5,-1,2,100\n", "line 2, column 4 (memory_used_bytes)", "-1 is not a value a GPU reports"),
        ("1,0,0.5,3,2,100\n", "line 2, column 4 (memory_used_bytes)", "3 is more memory than the GPU has (2)"),
        ("1,0,0.5,1,2,inf\n", "line 2, column 6 (power_watts)", "inf is not a value a GPU reports"),
        ("1,,0.5,1,2,100\n", "line 2, column 2 (gpu)", "empty; every row needs its GPU's UUID or index"),
    ],
)
def test_values_no_gpu_can_report_refuse_the_file_naming_line_and_column(tmp_path, rows, where, problem):
    path = tmp_path / "trace.csv"
    path.write_text(HEADER + rows)
    error = refused(path)
    assert str(error).startswith(f"{path}, {where}: {problem}")
    assert (error.path, error.line, error.column) == (str(path), int(where.split()[1][:-1]), where.split("column ")[1])


@pytest.mark.parametrize("content", [b"", b"\n", b"\xef\xbb\xbf  \r\n"])
def test_an_empty_file_is_said_to_be_empty_not_an_unknown_format(tmp_path, content):
    """An empty file (or one of a blank line, a byte-order mark) read as 'line 1: not a format gpulens reads'."""
    path = tmp_path / "trace.csv"
    path.write_bytes(content)
    assert (
        str(refused(path))
        == f"{path}: empty: no header and no row; a trace starts with its header (docs/trace-format.md)"
    )


@pytest.mark.parametrize(
    "content, where, problem",
    [
        (HEADER.replace("power_watts", "gpu_util").encode(), "line 1", "column(s) gpu_util appear more than once"),
        (HEADER.encode() + b'1,0,"' + b"9" * 200_000 + b'",1,2,3\n', "line 2", "not CSV: a field longer than 128 KiB"),
        (HEADER.encode() + b"1,0,0.5,1,2," + b"9" * (2 << 20) + b"\n", "line 2", "a line longer than 1024 KiB"),
        (HEADER.encode() + b"1,\xff\xfe,0.5,1,2,3\n", "line 1", "not UTF-8 text"),
    ],
)
def test_malformed_text_is_one_error_not_a_traceback(tmp_path, content, where, problem):
    path = tmp_path / "trace.csv"
    path.write_bytes(content)
    assert str(refused(path)).startswith(f"{path}, {where}: {problem}")


def test_a_line_of_gigabytes_is_refused_without_reading_it_whole(tmp_path):
    path = tmp_path / "trace.csv"
    with open(path, "wb") as f:
        f.write(HEADER.encode())
        f.write(b"9" * (64 << 20))  # one 64 MiB line, no newline: a binary file, or a broken writer
    tracemalloc.start()
    try:
        with pytest.raises(TraceError, match="line 2: a line longer than 1024 KiB"):
            read_trace(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20  # one bounded line (1 MiB of text, a few copies), not 64 MiB


def test_a_byte_order_mark_is_read_like_any_csv(tmp_path):
    # Excel and PowerShell write UTF-8 with a byte-order mark; it is not part of the first column's name.
    path = tmp_path / "trace.csv"
    path.write_bytes(b"\xef\xbb\xbf" + HEADER.encode() + b"1,GPU-1,0.5,1,2,100\n")
    frame = readers.read_files([path])
    assert (list(frame.gpu), list(frame.gpu_util), list(frame.timestamp)) == (["GPU-1"], [0.5], [1.0])


def test_nvidia_smi_values_are_checked_in_the_logs_own_units(tmp_path):
    header = "timestamp, uuid, utilization.gpu [%], memory.used [MiB], memory.total [MiB]\n"
    path = tmp_path / "smi.csv"
    path.write_text(header + "2024/01/01 10:00:00.000, GPU-1, 150 %, 10 MiB, 100 MiB\n")
    assert (
        str(refused(path)) == f"{path}, line 2, column 3 (utilization.gpu [%]): 150 is not a percentage from 0 to 100"
    )
    path.write_text(header + "2024/01/01 10:00:00.000, GPU-1, 50 %, 1000 MiB, 100 MiB\n")
    assert (
        str(refused(path))
        == f"{path}, line 2, column 4 (memory.used [MiB]): 1000 is more memory than the GPU has (100)"
    )
    path.write_text(
        header
        + "2024/01/01 10:00:00.000, GPU-1, 50 %, 10 MiB, 100 MiB\n2024/01/01 10:00:01, GPU-1, 50 %, -3 MiB, 100 MiB\n"
    )
    assert str(refused(path)) == f"{path}, line 3, column 4 (memory.used [MiB]): -3 is not a value a GPU reports"


def test_a_reserve_of_all_the_memory_is_refused_in_a_file_and_left_out_of_a_stores_capacity(tmp_path):
    """A reserve that leaves nothing to use is a broken exporter's: a file holding one is refused, naming it; in
    a store's or an exporter's rows it is blanked, and the total stays the capacity (never a share of zero)."""
    path = tmp_path / "smi.csv"
    header = "timestamp, uuid, memory.used [MiB], memory.total [MiB], memory.reserved [MiB]\n"
    path.write_text(header + "2024/01/01 10:00:00.000, GPU-1, 10 MiB, 100 MiB, 100 MiB\n")
    assert str(refused(path)) == (
        f"{path}, line 2, column 5 (memory.reserved [MiB]): 100 reserved is all the memory the GPU has (100) or "
        "more: nothing left to use"
    )
    rows = fr.normalize(
        pd.DataFrame(
            {"timestamp": [1.0], "gpu": ["GPU-1"], "memory_used_bytes": [10.0], "memory_total_bytes": [100.0]}
            | {"memory_reserved_bytes": [100.0]}
        )
    )
    kept, left_out, _ = fr.without_impossible(rows)
    assert left_out == {"memory_reserved_bytes": 1} and np.isnan(kept["memory_reserved_bytes"].iat[0])
    assert fr.memory_capacity(rows)[0].tolist() == [100.0]  # even where not blanked first


def test_what_the_driver_reserves_is_left_out_of_an_nvidia_smi_logs_memory_capacity(tmp_path):
    """nvidia-smi's memory.reserved (the H100 capture's 479 MiB of 81,559): a share is of the memory workloads
    can use, as the recording rule's; a log without the column keeps the total as its capacity."""
    mib = 2**20
    header = "timestamp, uuid, utilization.gpu [%], memory.used [MiB], memory.total [MiB]"
    path = tmp_path / "smi.csv"
    shares = {}
    for name, extra_header, extra in (("reserved", ", memory.reserved [MiB]", ", 479 MiB"), ("total", "", "")):
        path.write_text(f"{header}{extra_header}\n2024/01/01 10:00:00.000, GPU-1, 50 %, 19818 MiB, 81559 MiB{extra}\n")
        frame = readers.read_files([path])
        shares[name] = (frame.memory_used_bytes / fr.memory_capacity(frame)[0]).tolist()
    assert frame.memory_total_bytes.tolist() == [81559 * mib]
    assert shares == {"reserved": [19818 / (81559 - 479)], "total": [19818 / 81559]}


def test_dcgmi_dmon_values_are_checked_and_not_available_is_missing(tmp_path):
    path = tmp_path / "dmon.csv"
    path.write_text("EntityId,GRACT,FBUSD,TimeStamp\n0,0.5,N/A,1661698242\n0,-0.2,3,1661698243\n")
    assert str(refused(path)) == (
        f"{path}, line 3, column 2 (GRACT): -0.2 is not a ratio from 0 to 1 (percentages must be divided by 100)"
    )
    path.write_text("EntityId,GRACT,FBUSD,TimeStamp\n0,0.5,N/A,1661698242\n")
    [row] = readers.read_files([path]).itertuples()
    assert (row.gr_engine_active, np.isnan(row.memory_used_bytes), row.timestamp) == (0.5, True, 1661698242.0)


def test_parquet_with_native_timestamps_reads_as_unix_seconds(tmp_path):
    # pandas and Spark write times as Parquet timestamps (in ms, us or ns; with or without a zone).
    times = pd.to_datetime(["2026-11-21T10:00:00", "2026-11-21T10:00:01.5"], format="ISO8601")
    for stamps in (times, times.as_unit("ms"), times.tz_localize("UTC"), times.tz_localize("Europe/Paris")):
        path = tmp_path / "trace.parquet"
        pd.DataFrame({"timestamp": stamps, "gpu": ["a", "a"], "gpu_util": [0.5, 0.25]}).to_parquet(path)
        offset = 3600.0 if str(getattr(stamps, "tz", "")) == "Europe/Paris" else 0.0
        assert list(read_trace(path).timestamp) == [1795255200.0 - offset, 1795255201.5 - offset]


@pytest.mark.parametrize(
    "columns, message",
    [
        ({"gpu_util": [0.5, -0.3]}, ", row 2, column gpu_util: -0.3 is not a ratio from 0 to 1"),
        ({"gpu_util": ["0.5", "high"]}, ", column gpu_util: holds str values; numbers are expected"),
        ({"sm_activ": [0.5, 0.5]}, ": unknown column(s) sm_activ"),
        (
            {"memory_used_bytes": [1e9, 2e9], "memory_total_bytes": [4e9, 1e9]},
            ", row 2, column memory_used_bytes: 2e+09 is more memory than the GPU has (1e+09)",
        ),
    ],
)
def test_parquet_values_are_checked_like_csv(tmp_path, columns, message):
    path = tmp_path / "trace.parquet"
    pd.DataFrame({"timestamp": [1.0, 2.0], "gpu": ["a", "a"], **columns}).to_parquet(path)
    assert str(refused(path)).startswith(f"{path}{message}")


def test_a_dcgm_exporter_scrape_without_gpu_labels_is_named_not_a_traceback(tmp_path):
    path = tmp_path / "scrape.prom"
    path.write_text("# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization.\nDCGM_FI_DEV_GPU_UTIL 5\n")
    assert str(refused(path)) == (
        f"{path}: no GPU in it: no DCGM_FI_ sample carries the UUID label dcgm-exporter gives each GPU's rows"
    )
    scrape = (FIXTURES / "dcgm-exporter" / "a100-no-mig-scrape1.prom").read_text()
    path.write_text(
        scrape.replace("DCGM_FI_DEV_FB_USED{", 'DCGM_FI_DEV_FB_USED{bogus="1",', 1).replace(
            "DCGM_FI_DEV_GPU_UTIL{", "DCGM_FI_DEV_GPU_UTIL_X{", 1
        )
    )
    assert len(readers.read_files([path])) == 1


@pytest.mark.slow
def test_a_missing_file_at_a_terminal_is_one_line_and_exit_2(tmp_path):
    # At a terminal `report` shows a progress bar for large files, which once looked at the file first.
    leader, follower = pty.openpty()
    process = subprocess.Popen(
        [sys.executable, "-m", "gpulens", "report", str(tmp_path / "missing.csv")],
        stdin=follower,
        stdout=follower,
        stderr=follower,
        cwd=REPO,
    )
    os.close(follower)
    output = b""
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:  # EIO: the process closed the terminal
            break
        if not chunk:
            break
        output += chunk
    assert process.wait(timeout=60) == 2
    assert (
        output.decode().strip()
        == f"gpulens report: {tmp_path / 'missing.csv'}: cannot read it (No such file or directory)"
    )


DISK_FULL = """
import resource, signal, sys, os
from gpulens.exporter.recorder import Recorder
from gpulens.exporter.sampler import Sampler
from gpulens.exporter.sources.simulated import SimulatedSource
from gpulens.simulator.fleet import fleet_from_flags

signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG, as on a full disk
path = sys.argv[1]
sampler = Sampler(SimulatedSource(fleet_from_flags(2, "H100-SXM5-80GB", ["healthy_training"], seed=1)[0]), 1.0)
recorder = Recorder(path)
for _ in range(3):
    recorder.write(sampler.tick())
whole = os.path.getsize(path)
soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
resource.setrlimit(resource.RLIMIT_FSIZE, (whole + 100, hard))  # room for part of a row, not a whole sample
for _ in range(3):
    recorder.write(sampler.tick())
    assert os.path.getsize(path) == whole, "half a row left in the file"
resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))  # space again
recorder.write(sampler.tick())
recorder.close()
"""


def test_a_full_disk_while_recording_loses_no_row_and_leaves_no_half_row(tmp_path):
    path = tmp_path / "node.csv"
    result = subprocess.run(
        [sys.executable, "-c", DISK_FULL, str(path)], capture_output=True, text=True, cwd=REPO, timeout=60
    )
    assert result.returncode == 0, result.stderr
    frame = read_trace(path)  # whole lines only: the file reads
    assert len(frame) == 7 * 2  # three samples before, three while full (kept), one after, of two GPUs
    assert frame["timestamp"].is_monotonic_increasing
    assert result.stderr.count("cannot append to --record file") == 1
    assert "File too large; keeping the rows in memory" in result.stderr
    assert result.stderr.count("works again, the rows kept meanwhile written") == 1


@pytest.mark.parametrize(("model", "warned"), [("", True), ("NVIDIA A100 80GB PCIe", False)])
def test_a_file_without_a_gpu_model_is_priced_aloud_not_silently(capsys, model, warned):
    """dcgmi dmon names no model: the report says which price and links it assumed, and how to name it."""
    from gpulens import cli

    path = REPO / "tests" / "fixtures" / "captures" / "dcgmi-dmon" / "train_cv_dcgm.csv"
    argv = ["report", str(path), "--format", "json"] + (["--gpu-model", model] if model else [])
    assert cli.main(argv) == 0
    err = capsys.readouterr().err
    assert ("--gpu-model" in err) is warned
    if warned:
        assert err.startswith(
            "gpulens report: warning: 1 GPU with no model gpulens knows (the files name none): waste priced at "
            "$1.00/GPU-h and links assumed PCIe Gen3; name the model with --gpu-model"
        )


def test_a_file_of_no_known_format_lists_every_format_read(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("hello\n")
    with pytest.raises(readers.TraceError, match=r"a gpulens trace CSV, or Parquet named \*\.parquet, an nvidia-smi"):
        readers.read_files([path])


def _two_gpus_trace(tmp_path, name: str, sm_of_gpu_1: float = 0.3) -> str:
    """Ten minutes of two GPUs of one node at 15 s: GPU 0 busy, GPU 1 serving in bursts (at `sm_of_gpu_1`
    every other sample, quiet between), its model held."""
    rows = ["timestamp,gpu,node,namespace,pod,sm_active,memory_used_bytes,memory_total_bytes"]
    for k in range(40):
        t = 1_762_646_400 + 15 * k
        rows.append(f"{t},GPU-0,node-a,ml,train,0.9,{40 << 30},{80 << 30}")
        rows.append(f"{t},GPU-1,node-a,ml,notebook,{0.0 if k % 2 else sm_of_gpu_1},{2 << 30},{80 << 30}")
    path = tmp_path / name
    path.write_text("\n".join(rows) + "\n")
    return str(path)


@pytest.mark.slow
def test_the_same_file_given_twice_is_that_files_answer(tmp_path):
    """Rows that repeat others (the same file twice, logs that overlap) are kept once, not judged twice."""
    once = _two_gpus_trace(tmp_path, "a.csv")
    alone = readers.read_files([once])
    twice = readers.read_files([once, once])
    pd.testing.assert_frame_equal(twice, alone)
    # The oracle: the verdicts of the file read once, through the command users run.
    reports = []
    for files in ([once], [once, once]):
        out = tmp_path / f"{len(files)}.json"
        done = subprocess.run(
            [sys.executable, "-m", "gpulens", "report", *files, "--format", "json", "--out", str(out)],
            capture_output=True,
            text=True,
            cwd=REPO,
        )
        assert done.returncode == 0, done.stderr
        reports.append(out.read_text())
    assert reports[1] == reports[0] and "NaN" not in reports[0]
    # No model named: the plan cannot size a share of the serving replica's GPU, and says so (it divided by
    # zero before).
    assert '"bottleneck": "overprovisioned_serving"' in reports[0]
    assert "is not in gpulens' catalogue: what share of it the peak needs is unknown" in reports[0]


def test_two_rows_of_one_gpu_at_one_time_that_disagree_refuse_the_read_naming_both(tmp_path):
    first = _two_gpus_trace(tmp_path, "a.csv")
    second = _two_gpus_trace(tmp_path, "b.csv", sm_of_gpu_1=0.7)
    with pytest.raises(TraceError) as refused:
        readers.read_files([first, second])
    assert str(refused.value) == (
        f"{second}, row 2: GPU GPU-1 on node-a at 2025-11-09T00:00:00Z again, with another sm_active than in "
        f"{first}, row 2: the same GPU twice, or GPUs of two nodes without their node; give each GPU once (a "
        "node column, or one node's files per report)"
    )


def test_one_gpu_in_a_recording_and_an_nvidia_smi_log_of_the_same_span_is_refused_not_counted_twice(tmp_path):
    """The recording knows the GPU's node and pod, the log neither: read together, the GPU was judged twice,
    once as a GPU no pod holds. Logs of other spans of the same GPU, and a second recording, still read."""
    t0 = 1_762_646_400
    recording = tmp_path / "node-a.csv"
    recording.write_text(
        "timestamp,gpu,node,namespace,pod,gpu_util\n"
        + "".join(f"{t0 + k * 15},GPU-1,node-a,nlp,bert-0,0.9\n" for k in range(40))
    )

    def log(name: str, start: int) -> Path:
        path = tmp_path / name
        stamps = (time.strftime("%Y/%m/%d %H:%M:%S.000", time.gmtime(start + k * 15)) for k in range(40))
        path.write_text("timestamp, uuid, utilization.gpu [%]\n" + "".join(f"{s}, GPU-1, 90 %\n" for s in stamps))
        return path

    during, later = log("during.csv", t0 + 5), log("later.csv", t0 + 3600)
    with pytest.raises(TraceError) as refused:
        readers.read_files([recording, during])
    assert str(refused.value) == (
        f"{during}: GPU GPU-1 is also in {recording} over the same span, on node-a, held by nlp/bert-0 there and on "
        "no node, held by no pod here: two records of one GPU would count it twice, once as a GPU no pod holds; give "
        "one of the files (a gpulens recording has the node and the pods)"
    )
    assert len(readers.read_files([recording, later])) == 80
    assert len(readers.read_files([recording, recording])) == 40


def test_a_row_cut_short_at_the_end_is_skipped_not_read_as_a_smaller_number(tmp_path, caplog):
    trace = tmp_path / "node.csv"
    trace.write_text("timestamp,gpu,sm_active\n1762646400,GPU-0,0.55\n1762646401,GPU-0,0.5")  # was 0.57
    assert list(read_trace(trace)["sm_active"]) == [0.55]
    scrape = tmp_path / "dcgm.prom"
    scrape.write_text(
        'DCGM_FI_DEV_FB_USED{gpu="0",UUID="GPU-0"} 1000\nDCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-0"} 4'  # was 45
    )
    [row] = readers.read_dcgm_scrapes([scrape], 30.0, 1_762_646_400.0).to_dict("records")
    assert np.isnan(row["gpu_util"]) and row["memory_used_bytes"] == 1000 * 2**20
    assert [r.getMessage().split(":")[0] for r in caplog.records] == [str(trace), str(scrape)]
    assert "its last line has no end of line: a row cut short" in caplog.records[0].getMessage()


def test_a_recording_torn_by_a_crash_is_repaired_before_the_recorder_appends(tmp_path, caplog):
    """The exporter killed mid-write leaves half a row; restarted, it cuts the file back to its last
    whole row and appends after it, so the recording stays readable."""
    from gpulens.core import trace as tr
    from gpulens.exporter.recorder import Recorder
    from tests.test_xid import _gpu, _snapshot

    path = tmp_path / "node.csv"
    row = ["1762646400.000", "GPU-a", "n1"] + [""] * (len(tr.ALL_COLUMNS) - 3)
    whole = ",".join(tr.ALL_COLUMNS) + "\n" + ",".join(row) + "\n"
    path.write_text(whole + "1762646401.000,GPU-a,n")  # the crash
    recorder = Recorder(str(path), node="n1")
    assert path.read_text() == whole
    recorder.write(_snapshot(_gpu({})))
    recorder.close()
    assert list(read_trace(path)["gpu"].astype(str)) == ["GPU-a", "GPU-a"]
    assert "ended mid-row (the exporter stopped while writing): cut back to its last whole row (22 bytes)" in (
        caplog.text
    )


def test_a_header_of_a_hundred_thousand_columns_is_one_short_line(tmp_path):
    wide = tmp_path / "wide.csv"
    wide.write_text(",".join(["timestamp", "gpu"] + [f"c{i}" for i in range(100_000)]) + "\n")
    with pytest.raises(TraceError) as refused:
        read_trace(wide)
    assert str(refused.value) == (
        f"{wide}, line 1: unknown column(s) c0, c1, c2, c3, c4, c5, c6, c7, c8, c9 and 99,990 more; the trace "
        "columns are listed in docs/trace-format.md"
    )


@pytest.mark.parametrize(
    "stamp",
    ["2026-W47-6T10:00:00+00:00", "2026-11-21", "2026-11-21T10:00:00", "１７６２６４６４００", "1_762_646_400"],
    ids=["week date", "a date alone", "no zone", "fullwidth digits", "underscores"],
)
def test_odd_time_notations_are_refused_not_read_as_other_times(tmp_path, stamp):
    """Python reads each of these as some time; none is unix seconds or RFC 3339 as a tool writes them."""
    trace = tmp_path / "t.csv"
    trace.write_text(f"timestamp,gpu,sm_active\n{stamp},GPU-0,0.5\n")
    with pytest.raises(TraceError) as refused:
        read_trace(trace)
    assert str(refused.value) == (
        f"{trace}, line 2, column 1 (timestamp): {stamp!r} is neither unix seconds nor an RFC 3339 time"
    )


def test_an_nvidia_smi_log_with_two_columns_for_one_value_is_refused_naming_both(tmp_path):
    log = tmp_path / "smi.csv"
    log.write_text(
        "timestamp, uuid, clocks.sm [MHz], clocks.current.sm [MHz]\n"
        "2026/11/21 10:00:00.000, GPU-0, 1980 MHz, 1410 MHz\n"
    )
    with pytest.raises(TraceError) as refused:
        readers.read_files([log])
    assert str(refused.value) == (
        f"{log}, line 1: columns 'clocks.sm [MHz]' and 'clocks.current.sm [MHz]' give the same value: keep one in "
        "--query-gpu"
    )


def test_more_pods_than_a_report_can_hold_are_refused_saying_why(tmp_path, monkeypatch, capsys):
    """A million tiny pods took the report past the machine's memory with a traceback: past MAX_UNITS
    (lowered to 3 here) it is refused in one line with the fix."""
    from gpulens.analyzer.inputs import frame
    from gpulens.cli import main

    monkeypatch.setattr(frame, "MAX_UNITS", 3)
    fix = "one report judges at most 3 (about 20 KB each); report a shorter span (files: fewer at a time, or split "
    fix += "by time; a store: --since, --until)"
    # Pods by name: refused as the file is read, at the line of the fourth (not once all are read and judged).
    trace = tmp_path / "pods.csv"
    rows = [f"{1_762_646_400 + 15 * k},GPU-{i},ns,pod-{i},0.5" for i in range(5) for k in range(2)]
    trace.write_text("timestamp,gpu,namespace,pod,sm_active\n" + "\n".join(rows) + "\n")
    assert main(["report", str(trace)]) == 2
    assert capsys.readouterr().err == f"gpulens report: {trace}, line 8: more than 3 pods by this line: {fix}\n"
    # The same in Parquet, counted before the frame is built.
    pd.read_csv(trace).to_parquet(parquet := tmp_path / "pods.parquet")
    assert main(["report", str(parquet)]) == 2
    assert capsys.readouterr().err == f"gpulens report: {parquet}: 5 pods in the file: {fix}\n"
    # GPUs no pod holds count too, once the units are known.
    trace.write_text("timestamp,gpu,sm_active\n" + "".join(f"1762646400,GPU-{i},0.5\n" for i in range(5)))
    assert main(["report", str(trace)]) == 2
    assert capsys.readouterr().err.endswith(f"gpulens report: 5 pods and GPUs without a pod to judge: {fix}\n")


@pytest.mark.slow
def test_a_trace_takes_a_few_times_its_size_in_memory_while_it_is_read(tmp_path):
    """Rows are kept column by column, numbers as doubles and names as codes: a list of rows of Python
    objects took 14 to 19 times the file's size (a 1 GB recording needed 19 GiB)."""
    from gpulens.core import trace as tr

    path = tmp_path / "day.csv"
    filled = {"node": "n1", "gpu_model": "NVIDIA H100 80GB HBM3", "namespace": "ml", "pod": "train"}
    filled |= {"container": "main", "gpu_util": "0.95", "sm_active": "0.61", "memory_used_bytes": "40000000000"}
    filled |= {"memory_total_bytes": "85000000000", "power_watts": "650.2", "temperature_celsius": "60"}
    with open(path, "w") as f:
        f.write(",".join(tr.ALL_COLUMNS) + "\n")
        for k in range(20_000):
            for gpu in ("GPU-0", "GPU-1"):
                row = filled | {"timestamp": str(1_762_646_400 + k), "gpu": gpu}
                f.write(",".join(row.get(c, "") for c in tr.ALL_COLUMNS) + "\n")
    size = path.stat().st_size
    tracemalloc.start()
    try:
        frame = read_trace(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(frame) == 40_000 and frame["power_watts"].iloc[-1] == 650.2
    assert peak < 6 * size, f"{peak / size:.1f} times the file's size"


@pytest.mark.parametrize(
    ("make", "kind"),
    [
        (os.mkfifo, "a FIFO (a named pipe, or a shell's <(...))"),
        # /dev/null's own numbers, made in the test's folder: never the system's device.
        (lambda p: os.mknod(p, stat.S_IFCHR | 0o600, os.makedev(1, 3)), "a character device"),
        (os.mkdir, "a directory"),
    ],
)
def test_an_input_that_is_not_a_file_is_refused_at_once_naming_what_it_is(tmp_path, make, kind):
    path = tmp_path / "trace.csv"
    make(path)
    result = subprocess.run(
        [sys.executable, "-m", "gpulens", "report", str(path)], capture_output=True, text=True, cwd=REPO, timeout=60
    )
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr.strip() == (
        f"gpulens report: {path}: {kind}: gpulens reads a file, and reads it more than once (for its format, then "
        "its rows); write what it holds to a file and give that"
    )


def test_a_parquet_file_that_would_unpack_past_the_memory_available_is_refused_before_it_is_read(tmp_path, monkeypatch):
    """Two million rows of one GPU, 8 MiB on disk and 46 MiB of cells, which a report holds at 650 bytes a row
    (readers.REPORT_BYTES_PER_ROW, measured): 1,240 MiB. Refused from the footer with 1 GiB left, where a check
    of its cells (8 bytes each) let it through, and 200 million such rows took the machine."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = 2_000_000
    table = pa.table(
        {"timestamp": np.arange(rows, dtype=np.float64), "gpu": ["GPU-1"] * rows, "gpu_util": [0.5] * rows}
    )
    path = tmp_path / "trace.parquet"
    pq.write_table(table, path)
    monkeypatch.setattr(readers, "available_memory", lambda: 1 << 30)  # as if 1 GiB were left
    tracemalloc.start()
    try:
        with pytest.raises(TraceError) as refused:
            readers.read_files([path])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert str(refused.value) == (
        f"{path}: holds 2,000,000 rows, about 1,240 MiB once judged (650 bytes a row), more than the 1,024 MiB of "
        "memory available: report on a shorter span or fewer GPUs (split the file), or on a machine with more memory"
    )
    assert peak < 4 << 20, peak  # the footer only


def test_a_csv_trace_is_refused_at_the_row_past_the_memory_available(tmp_path, monkeypatch):
    """A text trace says nothing of its length: its rows are counted as they come, and the one past what the
    memory holds at 650 bytes a row is refused, naming its line, before more is read."""
    path = tmp_path / "trace.csv"
    path.write_text("timestamp,gpu,gpu_util\n" + "".join(f"{t},GPU-1,0.5\n" for t in range(2000)))
    monkeypatch.setattr(readers, "available_memory", lambda: 650 * 1000)  # 1,000 rows' worth
    with pytest.raises(TraceError) as refused:
        readers.read_files([path])
    assert str(refused.value) == (
        f"{path}, line 1002: more than 1,000 rows by this line, about 1 MiB once judged (650 bytes a row), more than "
        "the 1 MiB of memory available: report on a shorter span or fewer GPUs (split the file), or on a machine "
        "with more memory"
    )
    monkeypatch.setattr(readers, "available_memory", lambda: 650 * 2000)
    assert len(readers.read_files([path])) == 2000


def test_memory_that_runs_out_where_no_reader_could_see_it_is_one_line_not_a_traceback(monkeypatch, capsys):
    """The readers refuse what they can see will not fit; a MemoryError past them (a kernel's overcommit, a
    limit lowered while running) ends the command with one line that says what to do, and exit 2."""
    from gpulens import cli
    from gpulens.analyzer.cli import report as analyzer_cli

    def runs_out(args):
        raise MemoryError

    monkeypatch.setattr(analyzer_cli, "run_report", runs_out)
    assert cli.main(["report", "trace.csv"]) == 2
    assert capsys.readouterr().err == (
        "gpulens report: out of memory: give a shorter span (--since, --until) or fewer files, or run it where more "
        "memory is free\n"
    )
