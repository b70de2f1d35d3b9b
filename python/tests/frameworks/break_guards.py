"""Shows that each guard of the PyTorch DCP writer and reader (hipobj/torch/dcp.py) matters: the
test that covers a guard passes on the installed module, and FAILS when the module is replaced by
a copy with that one guard removed. One process (torch takes minutes to start in the lane) runs
pytest once per guard and state: an import hook (here, and through a sitecustomize on PYTHONPATH
in the processes a test starts) gives the copy as ``hipobj.torch.dcp``; nothing in the tree or
the venv is patched. In the lane's frameworks boot:

    tests/vm/run --mem 6G --cpu qemu64,+ssse3,+sse4.1,+sse4.2,+popcnt,+pclmulqdq -- \\
        tests/vm/frameworks --break-guards

Prints one line per guard and "N passed, M failed" (passed = the test failed without its guard);
exit status 0 when every guard was shown to matter."""

from __future__ import annotations

import importlib.util
import os
import sys

import pytest
import torch  # noqa: F401  (imported once, before any run)
import torch.distributed.checkpoint  # noqa: F401

import hipobj.torch
import hipobj.torch.dcp

HERE = os.path.dirname(os.path.abspath(__file__))
MODULE = "hipobj.torch.dcp"

# guard: (the line that holds it, what replaces it, the tests that must fail without it)
GUARDS = {
    "reader-checks-crc": (
        "            if got == read.span.crc:",
        "            if True:",
        "test_a_changed_byte_is_caught or test_a_rotten_byte_fails_the_reads_of_its_block",
    ),
    "reader-checks-edges-with-the-read": (
        "        pieces = [(read.first, landed, read.size)] + [(at, crc.result(), n) for at, n, crc in edges]",
        "        pieces = [(read.first, landed, read.size)]",
        "test_a_part_of_a_stored_tensor_reads_that_part and direct",
    ),
    "reader-checks-byte-items": (
        "            if got == want:",
        "            if True:",
        "test_a_rotten_byte_item_fails_the_load",
    ),
    "writer-records-block-crcs": (
        "            raw.update(_crcs.record(segment, size, crc_block))",
        "            raw[CRC] = _crcs.of_segment(segment)",
        "test_a_part_of_a_stored_tensor_reads_that_part",
    ),
    "writer-removes-old-metadata": (
        "        self.client.delete_object(Bucket=self.bucket, Key=self.key(METADATA))",
        "        pass",
        "test_a_save_killed_before_its_metadata_leaves_no_checkpoint",
    ),
    "staged-box-starts-at-first": (
        "                storage_offset=sum(o * s for o, s in zip(offsets, strides)) - first,",
        "                storage_offset=sum(o * s for o, s in zip(offsets, strides)),",
        "test_a_part_of_a_stored_tensor_reads_that_part and staged",
    ),
    "direct-read-starts-at-first": (
        '        start = raw["data"] + first * itemsize',
        '        start = raw["data"]',
        "test_a_part_of_a_stored_tensor_reads_that_part and direct",
    ),
    "safetensors-writer-removes-old-index": (
        "        self.client.delete_object(Bucket=self.bucket, Key=self.key(INDEX))",
        "        pass",
        "test_an_unfinished_save_is_no_checkpoint",
    ),
    "safetensors-writer-refuses-split-tensors": (
        "    if item.type == WriteItemType.SHARD and not _whole_tensor(item):",
        "    if False:",
        "test_what_the_layout_cannot_hold_is_refused",
    ),
    "safetensors-reader-checks-writer-crc": (
        "            info.hipobj.update(records.get(fqn, {}))",
        "            pass",
        "test_two_ranks_save_and_everyone_reads",
    ),
}
TEST_FILES = ("test_dcp.py", "test_dcp_safetensors.py")


FINDER = """import importlib.abc, importlib.util, os, sys


class BrokenDcp(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "hipobj.torch.dcp":
            here = os.path.dirname(os.path.abspath(__file__))
            return importlib.util.spec_from_file_location(name, os.path.join(here, "broken_dcp.py"))
        return None


sys.meta_path.insert(0, BrokenDcp())
"""


def use(source, where: str) -> None:
    """`source` (None: the installed module) is what `import hipobj.torch.dcp` gives from now on,
    in this process and, through a sitecustomize on PYTHONPATH, in the processes a test starts
    (the killed save runs in one)."""
    for name in ("hipobj.torch.dcp", "test_dcp", "test_dcp_safetensors"):
        sys.modules.pop(name, None)
    if hasattr(hipobj.torch, "dcp"):
        del hipobj.torch.dcp
    sys.meta_path[:] = [f for f in sys.meta_path if type(f).__name__ != "BrokenDcp"]
    os.environ.pop("PYTHONPATH", None)
    if source is None:
        return
    os.makedirs(where, exist_ok=True)
    with open(os.path.join(where, "broken_dcp.py"), "w") as f:
        f.write(source)
    with open(os.path.join(where, "sitecustomize.py"), "w") as f:
        f.write(FINDER)
    os.environ["PYTHONPATH"] = where
    exec(FINDER, {"__file__": os.path.join(where, "sitecustomize.py"), "__name__": "sitecustomize_broken"})


def run(tests: str, log: str) -> int:
    with open(log, "w") as out:
        saved = sys.stdout, sys.stderr
        sys.stdout = sys.stderr = out
        try:
            files = [os.path.join(HERE, name) for name in TEST_FILES]
            return int(pytest.main(["-q", "-p", "no:cacheprovider", "-x", "-k", tests, *files]))
        finally:
            sys.stdout, sys.stderr = saved


def first_error(log: str) -> str:
    with open(log) as f:
        return next((line.strip()[:160] for line in f if line.startswith("E ")), "no 'E' line")


def main() -> int:
    real_file = hipobj.torch.dcp.__file__
    with open(real_file) as f:
        real = f.read()
    logs = os.path.join(os.environ.get("TMPDIR", "/tmp"), "hipobj-break-guards")
    os.makedirs(logs, exist_ok=True)
    passed = failed = 0
    for name, (line, replacement, tests) in GUARDS.items():
        if real.count(line + "\n") != 1:
            print(f"FAIL {name}: the guarded line is not in {real_file} once (update this script)", flush=True)
            failed += 1
            continue
        use(None, "")
        intact = run(tests, os.path.join(logs, f"{name}.intact.log"))
        use(real.replace(line + "\n", replacement + "\n"), os.path.join(logs, name))
        broken_log = os.path.join(logs, f"{name}.broken.log")
        broken = run(tests, broken_log)
        use(None, "")
        if intact == 0 and broken == 1:
            print(f"ok   {name}: '{tests}' passes, and fails without the guard: {first_error(broken_log)}", flush=True)
            passed += 1
        else:
            print(f"FAIL {name}: '{tests}' exit {intact} with the guard (want 0), {broken} without (want 1); logs in {logs}", flush=True)
            failed += 1
    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
