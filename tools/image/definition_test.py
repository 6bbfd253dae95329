#!/usr/bin/env python3
"""Checks that the two image builds and the manifests describe the same image (docs/image.md).

The Dockerfile and tools/image/build.sh share the package list, stage.sh and finish-rootfs.sh;
this test checks the rest, which each spells out itself: the Debian release, the entrypoint,
command, PATH, working directory and labels, the version (CMake's project version, the
Dockerfile's default, the tag deploy/ and the chart pull), the repository the manifests name, and
the paths and uid the manifests rely on. No root, no network: it reads files.

Usage: definition_test.py [SOURCE_DIR]
"""
import json
import pathlib
import re
import shlex
import sys

import yaml

ROOT = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).parents[2])
failures = []


def check(ok, what):
    print(("  ok: " if ok else "  FAILED: ") + what)
    if not ok:
        failures.append(what)


def read(rel):
    return (ROOT / rel).read_text()


def dockerfile_stages(text):
    """[(from line, [(instruction, argument)])] with continuation lines joined, comments dropped."""
    logical, pending = [], ""
    for line in text.splitlines():
        if not pending and line.lstrip().startswith("#"):
            continue
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        line = (pending + line).strip()
        pending = ""
        if line:
            logical.append(line)
    stages = []
    for line in logical:
        instruction, _, argument = line.partition(" ")
        instruction = instruction.upper()
        if instruction == "FROM":
            stages.append((argument.strip(), []))
        elif stages:
            stages[-1][1].append((instruction, argument.strip()))
    return stages


def dockerfile_labels(argument):
    return dict(word.split("=", 1) for word in shlex.split(argument))


# ---- Versions and names -----------------------------------------------------------------------
project = re.search(r"project\(prism VERSION ([0-9.]+)", read("CMakeLists.txt")).group(1)
stages = dockerfile_stages(read("Dockerfile"))
check(len(stages) == 2, f"the Dockerfile has a build and a runtime stage ({len(stages)} stages)")
build_from, build_steps = stages[0]
runtime_from, runtime = stages[-1]
args = {}
for instruction, argument in runtime:
    if instruction == "ARG" and "=" in argument:
        name, value = argument.split("=", 1)
        args[name] = value.strip('"')
check(args.get("PRISM_VERSION") == project,
      f"Dockerfile ARG PRISM_VERSION={args.get('PRISM_VERSION')} is CMake's project version {project}")

kustomization = yaml.safe_load(read("deploy/kustomization.yaml"))
prism_image = next(i for i in kustomization["images"] if i["name"] == "prism")
chart = yaml.safe_load(read("charts/prism/Chart.yaml"))
values = yaml.safe_load(read("charts/prism/values.yaml"))
build_sh = read("tools/image/build.sh")
repository = re.search(r"^REPOSITORY=(\S+)$", build_sh, re.M).group(1)
check(str(prism_image.get("newTag")) == project,
      f"deploy/kustomization.yaml pulls tag {prism_image.get('newTag')}, the version {project}")
check(str(chart.get("appVersion")) == project,
      f"charts/prism/Chart.yaml appVersion {chart.get('appVersion')} is {project}")
check(values["image"].get("tag") in ("", None, project),
      f"charts/prism/values.yaml image.tag '{values['image'].get('tag')}' is empty (appVersion) or {project}")
check(prism_image.get("newName") == repository == values["image"]["repository"],
      f"kustomize ({prism_image.get('newName')}), the chart ({values['image']['repository']}) and "
      f"build.sh ({repository}) name one repository")

# ---- Base and payload ---------------------------------------------------------------------------
suite = re.search(r"^SUITE=(\S+)$", build_sh, re.M).group(1)
check(build_from.split()[0] == "debian:12" and runtime_from == "debian:12-slim" and
      suite == "bookworm",
      f"Debian 12 everywhere: build {build_from.split()[0]}, runtime {runtime_from}, build.sh {suite}")
runs = " ".join(a for i, a in runtime if i == "RUN")
copies = [a for i, a in runtime if i == "COPY"]
check("finish-rootfs.sh --apt" in runs and
      any("tools/image/runtime-packages.txt" in c and "tools/image/finish-rootfs.sh" in c
          for c in copies),
      "the Dockerfile's runtime stage installs runtime-packages.txt through finish-rootfs.sh --apt")
check('sed \'s/#.*//; s/[[:space:]]//g; /^$/d\' "$HERE/runtime-packages.txt"' in build_sh and
      '--include="$(IFS=,; echo "${packages[*]}")"' in build_sh and
      "finish-rootfs.sh'" in build_sh,
      "build.sh installs runtime-packages.txt with mmdebstrap and runs finish-rootfs.sh")
build_runs = " ".join(a for i, a in build_steps if i == "RUN")
check("tools/image/stage.sh build/release /payload" in build_runs and
      "COPY --from=build /payload/ /" in [f"COPY {c}" for c in copies] and
      '"$HERE/stage.sh" "$build_dir" "$work/payload"' in build_sh,
      "both builds take their payload from tools/image/stage.sh")
check("cmake --preset release" in build_runs and "packages.sh --check build/release" in build_runs,
      "the Dockerfile builds with the release preset and checks the package list against it")
finish = read("tools/image/finish-rootfs.sh")
check(finish.count("--apt") >= 1 and "runtime-packages.txt" in finish,
      "finish-rootfs.sh --apt reads runtime-packages.txt")

# ---- Configuration: entrypoint, command, PATH, working directory, labels -------------------------
def last(instruction):
    values = [a for i, a in runtime if i == instruction]
    return values[-1] if values else None


config = re.search(r"buildah config \\\n(.*?)\"\$ctr\"", build_sh, re.S).group(1)
options = shlex.split(config.replace("\\\n", " "))
pairs = list(zip(options[::2], options[1::2]))
script = {}
script_labels = {}
for flag, value in pairs:
    if flag == "--label":
        key, _, val = value.partition("=")
        script_labels[key] = val
    else:
        script[flag] = value
check(json.loads(last("ENTRYPOINT")) == json.loads(script["--entrypoint"]) ==
      ["/usr/local/bin/prism"],
      f"ENTRYPOINT {last('ENTRYPOINT')} is build.sh's {script['--entrypoint']}")
check(json.loads(last("CMD")) == json.loads(script["--cmd"]),
      f"CMD {last('CMD')} is build.sh's {script['--cmd']}")
check(last("ENV") == script["--env"], f"ENV {last('ENV')} is build.sh's {script['--env']}")
check(last("WORKDIR") == script["--workingdir"],
      f"WORKDIR {last('WORKDIR')} is build.sh's {script['--workingdir']}")
check(last("USER") is None, "the image's user is root (the node agent and MIG manager need it)")
docker_labels = {}
for instruction, argument in runtime:
    if instruction == "LABEL":
        docker_labels.update(dockerfile_labels(argument))
check(docker_labels.keys() == script_labels.keys(),
      f"the same labels: {sorted(docker_labels)} vs {sorted(script_labels)}")
# The build arguments the Dockerfile labels with are build.sh's variables of the same meaning.
same_meaning = {"${PRISM_VERSION}": "$version", "${PRISM_BUILD_COMMIT}": "$commit"}
for key, value in sorted(docker_labels.items()):
    check(same_meaning.get(value, value) == script_labels.get(key),
          f"label {key}: {value} in the Dockerfile, {script_labels.get(key)} in build.sh")

# ---- What the manifests expect of the image ----------------------------------------------------
stage = read("tools/image/stage.sh")
library = "/usr/local/prism/lib/libprism-vgpu.so"
for manifest in ("deploy/device-plugin/daemonset.yaml",
                 "charts/prism/templates/device-plugin.yaml"):
    check(f"[cp, {library}," in read(manifest),
          f"{manifest} copies {library}")
check(f'"$OUT{library}"' in stage and '"$OUT/usr/local/bin/prism"' in stage,
      f"stage.sh installs /usr/local/bin/prism and {library}")
for manifest in ("deploy/scheduler/deployment.yaml", "charts/prism/values.yaml",
                 "charts/prism/templates/scheduler.yaml"):
    text = read(manifest)
    if "runAsUser" in text:
        uids = set(re.findall(r"runAsUser:\s*(\d+)", text))
        check(uids <= {"65532"}, f"{manifest} runs as {sorted(uids)}, the image's nonroot 65532")
check("nonroot:x:65532:65532:" in finish, "finish-rootfs.sh makes the nonroot user 65532")

if failures:
    print(f"definition_test: {len(failures)} check(s) failed", file=sys.stderr)
    sys.exit(1)
print("definition_test: the Dockerfile, tools/image/build.sh and the manifests agree")
