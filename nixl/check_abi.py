#!/usr/bin/env python3
"""`make nixl`'s check of libplugin_HIPOBJ.so against the NIXL wheel it will be loaded by.

NIXL loads a plugin with dlopen(RTLD_NOW | RTLD_LOCAL) from its libnixl.so, and hands it C++
objects (std::string, std::vector, std::unordered_map inside nixlBlobDesc, nixl_b_params_t,
nixlBackendInitParams): the plugin and the wheel must agree on the C++ standard library's ABI, and
every symbol the plugin needs must come from a library the plugin itself names (nothing leaks in
from the RTLD_LOCAL libnixl.so). Checked, each a failure with its reason:

1. NIXL's headers in nixl/thirdparty are the unmodified copy (SHA256SUMS).
2. The plugin's NEEDED libraries are libhipobj and the C/C++ runtime only (no Abseil, no NIXL
   library: the wheel's are private copies with hashed names).
3. No undefined symbol of Abseil or of NIXL's own classes (those would have to come from the
   wheel, with its Abseil's inline namespace).
4. The C++11 string ABI on both sides: the wheel's libnixl.so exports its std::string API as
   std::__cxx11::basic_string, and the plugin uses the same (no old-ABI std::string, `Ss`).
5. The plugin exports nixl_plugin_init, nixl_plugin_fini and hipobj_nixl_stats and nothing else
   (exports.map: the engine's vtables and the standard library's instances stay the plugin's own).
6. The GLIBCXX/CXXABI versions the plugin needs are provided by the libstdc++ that the process
   loads (the system's: the wheel bundles none), printed beside what libnixl.so needs.

Usage: check_abi.py PLUGIN WHEEL_LIBDIR (the wheel's .nixl_cu12.mesonpy.libs).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ALLOWED_NEEDED = re.compile(r"^(libhipobj\.so\.\d+|libstdc\+\+\.so\.6|libm\.so\.6|libgcc_s\.so\.1|libc\.so\.6|libdl\.so\.2|ld-linux-x86-64\.so\.2)$")
EXPORTS = {"nixl_plugin_init", "nixl_plugin_fini", "hipobj_nixl_stats"}


def run(*args: str) -> str:
    return subprocess.run(args, check=True, capture_output=True, text=True).stdout


def needed(lib: Path) -> list[str]:
    return re.findall(r"\(NEEDED\)\s+Shared library: \[(.+?)\]", run("readelf", "-d", str(lib)))


def symbols(lib: Path, which: str) -> list[str]:
    out = run("nm", "-D", which, str(lib))
    return [line.split()[-1] for line in out.splitlines() if line.strip()]


def versions(lib: Path) -> set[str]:
    return set(re.findall(r"\b((?:GLIBCXX|CXXABI)_[0-9.]+)\b", run("readelf", "-V", str(lib))))


def version_key(v: str):
    name, _, num = v.partition("_")
    return (name, tuple(int(x) for x in num.split(".") if x))


def libstdcxx() -> Path:
    out = run("ldconfig", "-p")
    for line in out.splitlines():
        if "libstdc++.so.6 " in line and "x86-64" in line:
            return Path(line.split("=>")[-1].strip())
    raise SystemExit("check-abi: no libstdc++.so.6 in ldconfig -p")


def main() -> int:
    plugin, wheel_libs = Path(sys.argv[1]), Path(sys.argv[2])
    libnixl = wheel_libs / "libnixl.so"
    failures: list[str] = []

    sums = HERE / "thirdparty/nixl-1.4.0"
    check = subprocess.run(["sha256sum", "--quiet", "-c", "SHA256SUMS"], cwd=sums, capture_output=True, text=True)
    if check.returncode != 0:
        failures.append(f"1. NIXL headers differ from the v1.4.0 copy: {check.stdout.strip()} {check.stderr.strip()}")

    bad_needed = [n for n in needed(plugin) if not ALLOWED_NEEDED.match(n)]
    if bad_needed:
        failures.append(f"2. NEEDED beyond libhipobj and the C/C++ runtime: {bad_needed}")

    undefined = symbols(plugin, "--undefined-only")
    foreign = [s for s in undefined if "absl" in s or re.search(r"\d+nixl[A-Z]", s) or s.startswith("nixl")]
    if foreign:
        failures.append(f"3. undefined symbols only NIXL's wheel could provide: {foreign[:10]}")

    nixl_api = [s for s in symbols(libnixl, "--defined-only") if "basic_string" in s or "__cxx11" in s]
    if not any("__cxx11" in s for s in nixl_api):
        failures.append("4. the wheel's libnixl.so exports no std::__cxx11 symbol: not the C++11 string ABI")
    old_abi = [s for s in undefined + symbols(plugin, "--defined-only") if re.search(r"(^|[^A-Za-z])Ss|NSs", s)]
    if old_abi:
        failures.append(f"4. the plugin uses the old std::string ABI: {old_abi[:5]}")
    cxx11 = sum("__cxx11" in s for s in undefined)

    defined = {s.split("@")[0] for s in symbols(plugin, "--defined-only")}
    missing = EXPORTS - defined
    extra = sorted(defined - EXPORTS)
    if missing:
        failures.append(f"5. not exported: {sorted(missing)}")
    if extra:
        failures.append(f"5. exported beyond the plugin's entry points: {extra[:10]}")

    need = versions(plugin)
    have = versions(libstdcxx())
    lacking = sorted(need - have, key=version_key)
    if lacking:
        failures.append(f"6. the system's libstdc++ lacks {lacking}")
    top = lambda vs, p: max((v for v in vs if v.startswith(p)), key=version_key, default="-")

    print(f"check-abi: {plugin.name}: {len(undefined)} undefined symbols ({cxx11} of them std::__cxx11), "
          f"NEEDED {needed(plugin)}")
    print(f"check-abi: needs {top(need, 'GLIBCXX')} / {top(need, 'CXXABI')}; the wheel's libnixl.so needs "
          f"{top(versions(libnixl), 'GLIBCXX')} / {top(versions(libnixl), 'CXXABI')}; "
          f"{sum('__cxx11' in s for s in nixl_api)} of libnixl.so's exports use std::__cxx11")
    for f in failures:
        print(f"check-abi: FAIL {f}", file=sys.stderr)
    if not failures:
        print("check-abi: ok (headers unmodified, no symbol from NIXL or Abseil, C++11 string ABI on both sides)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
