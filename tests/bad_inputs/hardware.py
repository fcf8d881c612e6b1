"""Hardware entries: numbers that are not finite, not positive or not plausible, fields of the wrong
type, files that are not TOML; given with `-H FILE.toml` or found in a folder
($ROOFLINEKIT_HARDWARE_PATH) and asked for by name. Also calibrate's refused buffer sizes.

A bad file in a folder is skipped with a warning when it is not asked for (tests/test_validation.py);
asked for, it fails with one line naming the file and the field.
"""

from __future__ import annotations

from bad_inputs.case import GQA, TINY, Case

CAT = "hardware"

SOURCES = '[sources]\npeak_flops = "test"\nmemory_bandwidth = "test"\nmemory_bytes = "test"\n'


def entry(name: str = "Bad Accel", bandwidth: str = "3e12", peaks: str = "bf16 = 1e15", extra: str = "",
          sources: str = SOURCES) -> str:
    """A hardware TOML entry with one field replaced (every value is TOML source text)."""
    return (f'name = "{name}"\nvendor = "Test"\n{extra}memory_bytes = 80e9\nmemory_bandwidth = {bandwidth}\n'
            f"[peak_flops]\n{peaks}\n{sources}")


GOOD = entry(name="Good Accel", peaks="bf16 = 1e15\nfp32 = 6e13")
#: A folder with one good entry and one bad one, for ROOFLINEKIT_HARDWARE_PATH=hw (relative to the case folder).
IN_FOLDER = {"ROOFLINEKIT_HARDWARE_PATH": "hw"}


def folder(bad: str | bytes, stem: str = "bad_accel") -> dict[str, str | bytes]:
    return {"hw/good_accel.toml": GOOD, f"hw/{stem}.toml": bad}


def H(*args: str) -> list[str]:
    """profile the tiny model on the given hardware arguments."""
    return ["profile", GQA, *TINY, *args]


CASES = [
    # -- one number, given as a file ------------------------------------------------------------
    Case("profile-hw-nan-bandwidth", CAT, H("-H", "nan.toml"), ["nan.toml", "memory_bandwidth", "finite", "nan"],
         files={"nan.toml": entry(bandwidth="nan")}),
    Case("profile-hw-inf-peak", CAT, H("-H", "inf.toml"), ["inf.toml", "peak_flops.bf16", "finite"],
         files={"inf.toml": entry(peaks="bf16 = inf")}),
    Case("profile-hw-overflowing-bandwidth", CAT, H("-H", "big.toml"), ["big.toml", "memory_bandwidth", "finite"],
         files={"big.toml": entry(bandwidth="1e400")}),  # TOML reads 1e400 as inf
    Case("profile-hw-negative-peak", CAT, H("-H", "neg.toml"), ["neg.toml", "peak_flops.fp8", "positive"],
         files={"neg.toml": entry(peaks="bf16 = 1e15\nfp8 = -2e15")}),
    Case("profile-hw-zero-bandwidth", CAT, H("-H", "zero.toml"), ["zero.toml", "memory_bandwidth", "positive"],
         files={"zero.toml": entry(bandwidth="0")}),
    Case("profile-hw-tiny-bandwidth", CAT, H("-H", "tiny.toml"), ["tiny.toml", "memory_bandwidth", "implausible"],
         files={"tiny.toml": entry(bandwidth="1e-300")}),
    Case("profile-hw-gb-for-bytes", CAT, H("-H", "gbs.toml"), ["gbs.toml", "memory_bandwidth", "implausible"],
         files={"gbs.toml": entry(bandwidth="3350")}),  # GB/s written where B/s belongs
    Case("profile-hw-huge-peak", CAT, H("-H", "huge.toml"), ["huge.toml", "peak_flops.bf16", "implausible"],
         files={"huge.toml": entry(peaks="bf16 = 1.7e308")}),
    Case("profile-hw-string-bandwidth", CAT, H("-H", "str.toml"), ["str.toml", "memory_bandwidth", "must be a number"],
         files={"str.toml": entry(bandwidth='"3.35e12"')}),
    Case("profile-hw-bool-peak", CAT, H("-H", "bool.toml"), ["bool.toml", "peak_flops.bf16", "must be a number"],
         files={"bool.toml": entry(peaks="bf16 = true")}),
    Case("profile-hw-negative-memory", CAT, H("-H", "mem.toml"), ["mem.toml", "memory_bytes", "positive"],
         files={"mem.toml": entry().replace("memory_bytes = 80e9", "memory_bytes = -80e9")}),
    Case("profile-hw-nan-interconnect", CAT, H("-H", "link.toml"), ["link.toml", "interconnect_bandwidth", "finite"],
         files={"link.toml": entry(extra="interconnect_bandwidth = nan\n",
                                   sources=SOURCES + 'interconnect_bandwidth = "test"\n')}),
    # -- fields of the wrong type, files that are no TOML ------------------------------------------
    Case("profile-hw-aliases-int", CAT, H("-H", "alias.toml"), ["alias.toml", "aliases"],
         files={"alias.toml": entry(extra="aliases = 5\n")}),
    Case("profile-hw-name-int", CAT, H("-H", "name.toml"), ["name.toml", "name must be a string"],
         files={"name.toml": entry().replace('name = "Bad Accel"', "name = 5")}),
    Case("profile-hw-verified-string", CAT, H("-H", "ver.toml"), ["ver.toml", "verified"],
         files={"ver.toml": entry(extra='verified = "yes"\n')}),
    Case("profile-hw-source-not-text", CAT, H("-H", "src.toml"), ["src.toml", "sources.memory_bandwidth"],
         files={"src.toml": entry(sources='[sources]\npeak_flops = "t"\nmemory_bytes = "t"\nmemory_bandwidth = 1\n')}),
    Case("profile-hw-binary-file", CAT, H("-H", "blob.toml"), ["blob.toml", "not a TOML text file"],
         files={"blob.toml": b"\x89PNG\r\n\x1a\n\x00\xff\xfe\xfd"}),
    Case("profile-hw-invalid-toml", CAT, H("-H", "broken.toml"), ["broken.toml", "not valid TOML"],
         files={"broken.toml": 'name = "X"\nmemory_bandwidth = [1, 2\n'}),
    Case("profile-hw-compare-hardware-nan", CAT, H("--compare-hardware", "alt.toml"), ["alt.toml", "peak_flops.bf16"],
         files={"alt.toml": entry(peaks="bf16 = nan")}),
    # -- a bad file in a folder, asked for by name, alias or file stem ----------------------------
    Case("profile-hw-folder-entry-by-name", CAT, H("-H", "Bad Accel"), ["bad_accel.toml", "memory_bandwidth", "finite"],
         files=folder(entry(bandwidth="inf")), env=IN_FOLDER),
    Case("profile-hw-folder-entry-by-alias", CAT, H("-H", "BA-1"), ["bad_accel.toml", "peak_flops.bf16", "positive"],
         files=folder(entry(peaks="bf16 = -1e15", extra='aliases = ["BA-1"]\n')), env=IN_FOLDER),
    Case("profile-hw-folder-binary-by-stem", CAT, H("-H", "bad_accel"), ["bad_accel.toml", "not a TOML text file"],
         files=folder(b"\x00\x01\x02\xff\xfe" * 20), env=IN_FOLDER),
    Case("sweep-hw-file-nan", CAT, ["sweep", GQA, *TINY, "-b", "1,2", "-H", "nan.toml"],
         ["nan.toml", "memory_bandwidth", "finite"], files={"nan.toml": entry(bandwidth="nan")}),
    Case("sweep-hw-folder-entry-aliases-int", CAT, ["sweep", GQA, *TINY, "-b", "1,2", "-H", "Bad Accel"],
         ["bad_accel.toml", "aliases"], files=folder(entry(extra="aliases = 5\n")), env=IN_FOLDER),
    Case("hardware-show-file-zero-peak", CAT, ["hardware", "show", "zero.toml"], ["zero.toml", "peak_flops.bf16"],
         files={"zero.toml": entry(peaks="bf16 = 0")}),
    Case("hardware-show-folder-entry-nan", CAT, ["hardware", "show", "Bad Accel"],
         ["bad_accel.toml", "memory_bandwidth", "finite"], files=folder(entry(bandwidth="nan")), env=IN_FOLDER),
    Case("hardware-show-folder-entry-json", CAT, ["hardware", "show", "bad_accel", "-f", "json"],
         ["bad_accel.toml", "peak_flops.bf16", "implausible"], files=folder(entry(peaks="bf16 = 1e-300")),
         env=IN_FOLDER),
    # -- calibrate: a copy too small to time memory, one that cannot fit ----------------------------
    Case("calibrate-size-too-small", CAT, ["calibrate", "--device", "cpu", "--size-mb", "0.000001"],
         ["--size-mb", "1 MB minimum"]),
    Case("calibrate-size-below-minimum", CAT, ["calibrate", "--device", "cpu", "--size-mb", "0.5", "-o", "c.toml"],
         ["--size-mb 0.5", "minimum"]),
    Case("calibrate-size-does-not-fit", CAT, ["calibrate", "--device", "cpu", "--size-mb", "1e12"],
         ["--size-mb 1e+12", "does not fit"]),
]
