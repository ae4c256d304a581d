"""Unpacks a newer Mesa lavapipe than the machine's, with what it needs to
run, into a folder: `cargo xtask test` runs the cooperative-matrix tests
on it (Debian 12's lavapipe has no VK_KHR_cooperative_matrix; Debian 13's
backports have it).

Usage: newer_lavapipe.py DEST

Reads the package lists of Debian 13 ("trixie") and its backports and
updates from deb.debian.org, resolves mesa-vulkan-drivers' dependencies
(taking each package from the backports where they have it, as apt does
for a backports package, then from the updates, then from the release),
downloads those .deb files into DEST/debs and unpacks them into
DEST/root with `dpkg-deb -x`. Nothing is installed on the system: the
libraries, the C library among them, are used only by programs started
with DEST/run (its dynamic loader and library path), with DEST/lvp.json
as the Vulkan driver list and DEST/root/usr/share/vulkan/explicit_layer.d
as the layer path. Prints the Mesa version. A second run with
the same packages does nothing.
"""

import hashlib
import lzma
import os
import subprocess
import sys
import urllib.request

MIRROR = "https://deb.debian.org/debian"
# In the order a package is taken from.
SUITES = ["trixie-backports", "trixie-updates", "trixie"]
ROOT_PACKAGE = "mesa-vulkan-drivers"
# Needed to run, never listed as a dependency of what needs them: the C
# library, the Vulkan loader, and a validation layer that knows
# VK_KHR_cooperative_matrix (Debian 12's predates it).
EXTRA = ["libc6", "libvulkan1", "vulkan-validationlayers"]


def fetch(url, what):
    try:
        with urllib.request.urlopen(url, timeout=120) as r:
            return r.read()
    except Exception as e:  # noqa: BLE001 - the message names the URL
        sys.exit(f"newer_lavapipe: expected {what} at {url}, found an error: {e}")


def packages(arch):
    """{suite: {name: fields}} of the suites' main component."""
    out = {}
    for suite in SUITES:
        url = f"{MIRROR}/dists/{suite}/main/binary-{arch}/Packages.xz"
        text = lzma.decompress(fetch(url, "a package list")).decode("utf-8", "replace")
        table = {}
        fields = {}
        for line in text.split("\n") + [""]:
            if not line:
                if "Package" in fields:
                    table.setdefault(fields["Package"], fields)
                fields = {}
            elif line[0] not in " \t" and ": " in line:
                key, _, value = line.partition(": ")
                fields[key] = value
        out[suite] = table
    return out


def resolve(lists):
    """The .deb files of ROOT_PACKAGE and EXTRA with their dependencies."""
    provided = {}
    for suite in reversed(SUITES):
        for name, fields in lists[suite].items():
            for p in fields.get("Provides", "").split(","):
                p = p.strip().split(" ")[0]
                if p:
                    provided[p] = name

    def find(name):
        for suite in SUITES:
            if name in lists[suite]:
                return lists[suite][name]
        return None

    wanted = [ROOT_PACKAGE] + EXTRA
    seen = set()
    files = []
    root_version = None
    while wanted:
        name = wanted.pop()
        fields = find(name) or (find(provided[name]) if name in provided else None)
        if fields is None:
            if name == ROOT_PACKAGE:
                sys.exit(f"newer_lavapipe: expected {ROOT_PACKAGE} in {SUITES}, found none")
            continue
        if fields["Package"] in seen:
            continue
        seen.add(fields["Package"])
        if fields["Package"] == ROOT_PACKAGE:
            root_version = fields["Version"]
        files.append(fields["Filename"])
        depends = fields.get("Pre-Depends", "") + "," + fields.get("Depends", "")
        for alternatives in depends.split(","):
            first = alternatives.split("|")[0].strip()
            if first:
                wanted.append(first.split(" ")[0].split(":")[0])
    return root_version, files


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: newer_lavapipe.py DEST")
    dest = os.path.abspath(sys.argv[1])
    arch = subprocess.run(
        ["dpkg", "--print-architecture"], capture_output=True, text=True, check=True
    ).stdout.strip()
    lists = packages(arch)
    version, files = resolve(lists)
    # Named by what is unpacked, so that another set is unpacked afresh.
    digest = hashlib.sha256("\n".join(sorted(files)).encode()).hexdigest()[:16]
    marker = os.path.join(dest, f"unpacked-{digest}")
    if os.path.exists(marker):
        print(f"Mesa {version} (unpacked before)")
        return
    debs = os.path.join(dest, "debs")
    root = os.path.join(dest, "root")
    subprocess.run(["rm", "-rf", root], check=True)
    for old in os.listdir(dest) if os.path.isdir(dest) else []:
        if old.startswith("unpacked-"):
            os.remove(os.path.join(dest, old))
    os.makedirs(debs, exist_ok=True)
    os.makedirs(root, exist_ok=True)
    for path in files:
        local = os.path.join(debs, os.path.basename(path))
        if not os.path.exists(local):
            data = fetch(f"{MIRROR}/{path}", "a package")
            with open(local + ".part", "wb") as f:
                f.write(data)
            os.replace(local + ".part", local)
        subprocess.run(["dpkg-deb", "-x", local, root], check=True)
    triple = {"amd64": "x86_64-linux-gnu", "arm64": "aarch64-linux-gnu"}.get(arch)
    if triple is None:
        sys.exit(f"newer_lavapipe: expected the architecture amd64 or arm64, found {arch}")
    libs = os.path.join(root, "usr/lib", triple)
    loader = {"amd64": "ld-linux-x86-64.so.2", "arm64": "ld-linux-aarch64.so.1"}[arch]
    lvp = os.path.join(libs, "libvulkan_lvp.so")
    if not os.path.exists(lvp):
        sys.exit(f"newer_lavapipe: expected {lvp} in {ROOT_PACKAGE} {version}, found none")
    with open(os.path.join(dest, "lvp.json"), "w") as f:
        f.write(
            '{"file_format_version": "1.0.0", '
            f'"ICD": {{"library_path": "{lvp}", "api_version": "1.3.0"}}}}\n'
        )
    # The unpacked libraries first, then the system's (for what the
    # program loads that Mesa's Vulkan driver does not need).
    run = os.path.join(dest, "run")
    with open(run, "w") as f:
        f.write(
            "#!/bin/sh\n"
            "# Runs a program with the unpacked C library and libraries.\n"
            f'exec "{os.path.join(libs, loader)}" --library-path '
            f'"{libs}:/usr/lib/{triple}:/lib/{triple}" "$@"\n'
        )
    os.chmod(run, 0o755)
    open(marker, "w").close()
    print(f"Mesa {version}")


if __name__ == "__main__":
    main()
