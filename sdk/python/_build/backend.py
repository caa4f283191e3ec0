"""A PEP 517 build backend of the standard library alone, so that `pip install
./sdk/python` works offline (pip installs no setuptools for it). It builds a pure-Python
wheel of src/tidepool and an sdist of this folder; `pip install -e` gets a .pth file."""

import base64
import hashlib
import io
import os
import tarfile
import tomllib
import zipfile

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SRC = os.path.join(HERE, "src")


def _project():
    with open(os.path.join(HERE, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)["project"]


def _metadata():
    p = _project()
    lines = ["Metadata-Version: 2.1", f"Name: {p['name']}", f"Version: {p['version']}",
             f"Summary: {p.get('description', '')}",
             f"Requires-Python: {p.get('requires-python', '')}",
             f"License: {p.get('license', {}).get('text', '')}"]
    body = ""
    readme = os.path.join(HERE, p.get("readme", "README.md"))
    if os.path.exists(readme):
        lines.append("Description-Content-Type: text/markdown")
        with open(readme, encoding="utf-8") as f:
            body = "\n" + f.read()
    return "\n".join(lines) + "\n" + body


def _dist_info():
    p = _project()
    return f"{p['name']}-{p['version']}.dist-info", f"{p['name']}-{p['version']}"


WHEEL = "Wheel-Version: 1.0\nGenerator: tidepool-backend\nRoot-Is-Purelib: true\nTag: py3-none-any\n"


def _record_line(name, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def _write_wheel(wheel_directory, files):
    info, base = _dist_info()
    files = dict(files)
    files[f"{info}/METADATA"] = _metadata().encode()
    files[f"{info}/WHEEL"] = WHEEL.encode()
    record = [_record_line(n, d) for n, d in files.items()] + [f"{info}/RECORD,,"]
    files[f"{info}/RECORD"] = ("\n".join(record) + "\n").encode()
    name = f"{base}-py3-none-any.whl"
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w", zipfile.ZIP_DEFLATED) as z:
        for n, d in files.items():
            z.writestr(zipfile.ZipInfo(n, date_time=(2026, 1, 1, 0, 0, 0)), d)
    return name


def _package_files():
    out = {}
    for root, dirs, names in os.walk(SRC):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        for n in sorted(names):
            if n.endswith((".py", ".typed")):
                full = os.path.join(root, n)
                with open(full, "rb") as f:
                    out[os.path.relpath(full, SRC).replace(os.sep, "/")] = f.read()
    return out


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    return _write_wheel(wheel_directory, _package_files())


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    return _write_wheel(wheel_directory, {"tidepool-editable.pth": (SRC + "\n").encode()})


def build_sdist(sdist_directory, config_settings=None):
    _, base = _dist_info()
    name = f"{base}.tar.gz"
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz") as t:
        for rel in ["pyproject.toml", "README.md", "_build/backend.py"] + \
                   ["src/" + n for n in _package_files()]:
            full = os.path.join(HERE, rel)
            if os.path.exists(full):
                t.add(full, arcname=f"{base}/{rel}")
        pkg = _metadata().encode()
        ti = tarfile.TarInfo(f"{base}/PKG-INFO")
        ti.size = len(pkg)
        t.addfile(ti, io.BytesIO(pkg))
    return name
