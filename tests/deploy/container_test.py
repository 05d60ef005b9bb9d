#!/usr/bin/env python3
"""The deploy/Containerfile image run for real: a replica in a container, checked from the host.

    tests/deploy/container_test.py [--engine podman|docker] [--image minfer:test] [--build]
                                   [--model ../shared/models/stories260K.gguf] [--ccache DIR]

Not run by ctest or CI (building the image compiles minfer: ~10 minutes of both cores on the
2-core CI machine); run it by hand after changing deploy/, see docs/DEPLOY.md. Exit status 77
(a skip) where the engine, the image (without --build), the base images (with --build) or the
model is absent. --build builds the image first from the repository root (podman: --format
docker, which keeps the HEALTHCHECK); --ccache DIR mounts a host ccache directory over the
build's cache mount (podman only).

Checks, each bounded in time:
  1. the RAM guard sees the container's memory limit: with --memory 64m the replica exits 1
     with "not enough memory" before its port opens;
  2. a replica with --memory 512m, the model's folder mounted read-only and its port published
     on 127.0.0.1:<free port>: /health answers 200, a chat completion and a streamed one answer
     with text, /metrics counts them, the process runs as the image's unprivileged user, and
     the image's HEALTHCHECK command reports healthy;
  3. `ENGINE stop` (SIGTERM) ends it with exit code 0 within the stop timeout;
  4. with --systemd (podman): deploy/systemd/minfer-serve@.service under a real systemd as the
     container's init (tests/deploy/systemd.Containerfile, built on the image): the unit
     starts with its env files, answers /health and a chat completion through a published
     port, runs as a dynamic unprivileged user, and `systemctl stop` ends it with Result=success
     and exit status 0.
Only the containers this script created (named minfer-test-<pid>-*) are stopped and removed;
the images it built (IMAGE and IMAGE-systemd) stay, so a rerun without --build reuses them.
"""
import argparse
import http.client
import json
import os
import re
import socket
import subprocess
import sys
import time

SKIP = 77
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
T0 = time.monotonic()


def log(msg):
    print(f"[{time.monotonic() - T0:6.1f}s] {msg}", flush=True)


def engine_cmd(args, *cmd, timeout=60, check=True):
    r = subprocess.run([args.engine, *cmd], stdin=subprocess.DEVNULL, capture_output=True,
                       text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise RuntimeError(f"{args.engine} {' '.join(cmd)}: exit {r.returncode}: "
                           f"{r.stderr.strip()[-1500:]}")
    return r


def image_exists(args, name):
    return engine_cmd(args, "image", "inspect", name, check=False).returncode == 0


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def request(port, method, path, body=None, timeout=30.0):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        headers = {"Content-Type": "application/json"} if body is not None else {}
        conn.request(method, path, body=None if body is None else json.dumps(body),
                     headers=headers)
        r = conn.getresponse()
        return r.status, r.read().decode()
    finally:
        conn.close()


def wait_exit(args, name, limit_s):
    """The container's exit code once it has stopped, or None after limit_s."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        r = engine_cmd(args, "inspect", "--format", "{{.State.Running}} {{.State.ExitCode}}",
                       name)
        running, code = r.stdout.split()
        if running == "false":
            return int(code)
        time.sleep(0.5)
    return None


def build(args):
    for base in ("docker.io/library/debian:12", "docker.io/library/debian:12-slim"):
        if not image_exists(args, base) and not image_exists(args, base.split("/")[-1]):
            log(f"SKIP: no {base} image (scripts/container-base.sh makes it from a mirror)")
            sys.exit(SKIP)
    cmd = [args.engine, "build", "-f", "deploy/Containerfile", "-t", args.image]
    if args.engine == "podman":
        cmd += ["--format", "docker"]
        if args.ccache:
            cmd += ["-v", f"{os.path.abspath(args.ccache)}:/root/.cache/ccache"]
    # The Containerfile's cache mount needs BuildKit, not the default of docker 20.10 (Debian 12).
    env = dict(os.environ, DOCKER_BUILDKIT="1")
    if args.engine == "docker":
        cmd += ["--progress", "plain"]
    log("building: " + " ".join(cmd))
    start = time.monotonic()
    r = subprocess.run(cmd + ["."], cwd=REPO, stdin=subprocess.DEVNULL, capture_output=True,
                       text=True, timeout=3600, env=env)
    out = r.stdout + r.stderr
    if r.returncode != 0:
        raise RuntimeError(f"build failed (exit {r.returncode}):\n{out[-4000:]}")
    for line in out.splitlines():
        # ccache's counts and --version, bare (podman) or after docker's "#17 23.94 " prefix.
        if re.match(r"(#\d+ [\d.]+ )?\s*(Hits:|Misses:|minfer \d+\.\d+\.\d+ )", line):
            log("  build: " + line.strip())
    log(f"built {args.image} in {time.monotonic() - start:.0f} s")


def run_replica(args, name, memory, port):
    model_dir, model_file = os.path.split(os.path.abspath(args.model))
    cmd = ["run", "-d", "--name", name, "--memory", memory, "-v", f"{model_dir}:/models:ro"]
    if port:
        cmd += ["-p", f"127.0.0.1:{port}:8080"]
    cmd += [args.image, "-m", f"/models/{model_file}", "-c", "2048", "-np", "2", "-t", "1",
            "--metrics", "--chat-template", "chatml"]
    engine_cmd(args, *cmd)


def check_ram_guard(args, name):
    run_replica(args, name, "64m", None)
    code = wait_exit(args, name, 30)
    logs = engine_cmd(args, "logs", name).stderr + engine_cmd(args, "logs", name).stdout
    assert code == 1, f"--memory 64m: exit code {code}, expected 1; logs:\n{logs[-1500:]}"
    assert "not enough memory" in logs, f"--memory 64m: no RAM guard message:\n{logs[-1500:]}"
    log("1. --memory 64m: exit 1, " + logs.strip().splitlines()[-1][:160] + "...")


def wait_health(args, name, port, limit_s=60):
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        try:
            if request(port, "GET", "/health", timeout=2)[0] == 200:
                return
        except OSError:
            pass
        if wait_exit(args, name, 0) is not None:
            break
        time.sleep(0.25)
    logs = engine_cmd(args, "logs", name, check=False)
    text = (logs.stdout + logs.stderr)[-1500:]
    raise RuntimeError(f"/health not 200 within {limit_s} s:\n{text}")


def check_serving(args, name, port):
    wait_health(args, name, port)
    log(f"2. /health on 127.0.0.1:{port}: 200")
    body = {"model": "m", "max_tokens": 24, "temperature": 0,
            "messages": [{"role": "user", "content": "Tell me a story about a cat."}]}
    status, text = request(port, "POST", "/v1/chat/completions", body)
    assert status == 200, f"chat completion: {status} {text[:500]}"
    answer = json.loads(text)
    content = answer["choices"][0]["message"]["content"]
    assert content.strip(), f"empty completion: {text[:500]}"
    log(f"   chat completion: {answer['usage']} {content[:60]!r}")
    status, text = request(port, "POST", "/v1/chat/completions", dict(body, stream=True))
    events = [line[6:] for line in text.splitlines() if line.startswith("data: ")]
    assert status == 200 and events and events[-1] == "[DONE]", f"stream: {status} {text[-500:]}"
    pieces = "".join(json.loads(e)["choices"][0]["delta"].get("content") or ""
                     for e in events[:-1] if json.loads(e).get("choices"))
    assert pieces.strip(), f"stream without text: {text[-500:]}"
    log(f"   streamed completion: {len(events) - 1} events, {pieces[:60]!r}")
    status, text = request(port, "GET", "/metrics")
    assert status == 200, f"/metrics: {status}"
    reqs = [line for line in text.splitlines() if line.startswith("minfer:requests_total ")]
    assert reqs == ["minfer:requests_total 2"], f"/metrics requests_total: {reqs}"
    log(f"   /metrics: {reqs[0]}")
    uid = engine_cmd(args, "exec", name, "id", "-u").stdout.strip()
    assert uid != "0", "the server runs as root"
    log(f"   process uid in the container: {uid}")
    if args.engine == "podman":
        r = engine_cmd(args, "healthcheck", "run", name, check=False)
        assert r.returncode == 0, f"healthcheck: exit {r.returncode} {r.stdout}{r.stderr}"
        log(f"   podman healthcheck run: exit 0 {r.stdout.strip()}")
    else:
        deadline = time.monotonic() + 40  # the first check runs after --interval (10 s)
        state = ""
        while time.monotonic() < deadline and state != "healthy":
            time.sleep(1)
            state = engine_cmd(args, "inspect", "--format", "{{.State.Health.Status}}",
                               name).stdout.strip()
        assert state == "healthy", f"docker health status: {state!r}"
        log("   docker health status: healthy")


def check_stop(args, name):
    start = time.monotonic()
    engine_cmd(args, "stop", "-t", "10", name, timeout=30)
    code = wait_exit(args, name, 15)
    assert code == 0, f"stop: exit code {code}, expected 0"
    log(f"3. {args.engine} stop: exit code 0 after {time.monotonic() - start:.1f} s")


def check_systemd(args, name):
    image = args.image.rsplit(":", 1)[0] + "-systemd:test"
    cmd = [args.engine, "build", "--format", "docker", "-f", "tests/deploy/systemd.Containerfile",
           "--build-arg", f"MINFER_IMAGE={args.image}", "-t", image, "."]
    r = subprocess.run(cmd, cwd=REPO, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                       timeout=900)
    if r.returncode != 0:
        raise RuntimeError(f"systemd image build failed:\n{(r.stdout + r.stderr)[-3000:]}")
    port = free_port()
    # systemd sets up the unit's mount namespace (ProtectSystem=, PrivateTmp=, ...): that needs
    # CAP_SYS_ADMIN in the container.
    engine_cmd(args, "run", "-d", "--name", name, "--systemd=always", "--cap-add", "SYS_ADMIN",
               "-v", f"{os.path.abspath(args.model)}:/srv/models/model.gguf:ro",
               "-p", f"127.0.0.1:{port}:8081", image)
    unit = "minfer-serve@8081"

    def show(*props):
        out = engine_cmd(args, "exec", name, "systemctl", "show", unit,
                         *[f"--property={p}" for p in props]).stdout
        return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)

    try:
        wait_health(args, name, port, limit_s=90)
    except RuntimeError:
        journal = engine_cmd(args, "exec", name, "journalctl", "-u", unit, "--no-pager",
                             check=False)
        raise RuntimeError(f"{unit} not healthy; journal:\n{journal.stdout[-2000:]}")
    state = show("ActiveState", "MainPID")
    proc = f"/proc/{state['MainPID']}"

    def read(cmd):
        return engine_cmd(args, "exec", name, "sh", "-c", cmd).stdout

    uid = read(f"sed -n 's/^Uid:\\s*//p' {proc}/status").split()
    assert state["ActiveState"] == "active" and uid and uid[0] != "0", f"{state} uid {uid}"
    log(f"4. {unit} under systemd: active, uid {uid[0]}, /health 200 on 127.0.0.1:{port}")
    # The env files and %i expanded, MINFER_ARGS split into words.
    argv = read(f"tr '\\0' '\\n' < {proc}/cmdline").split("\n")[:-1]
    want = ["/usr/local/bin/minfer", "serve", "-m", "/srv/models/model.gguf", "--host", "0.0.0.0",
            "--port", "8081", "-c", "2048", "-np", "2", "-t", "1", "--metrics", "--chat-template",
            "chatml"]
    assert argv == want, f"argv {argv}"
    log(f"   argv: {' '.join(argv)}")
    # ProtectSystem=strict: the unit sees / read-only (fields: id parent dev root mountpoint opts).
    root = [ln.split() for ln in read(f"cat {proc}/mountinfo").splitlines() if ln.split()[4] == "/"]
    assert root and "ro" in root[-1][5].split(","), f"/ in the unit's namespace: {root}"
    log(f"   / in the unit's mount namespace: {root[-1][5]}")
    body = {"model": "m", "max_tokens": 16, "temperature": 0,
            "messages": [{"role": "user", "content": "Tell me a story."}]}
    status, text = request(port, "POST", "/v1/chat/completions", body)
    assert status == 200 and json.loads(text)["choices"][0]["message"]["content"], text[:300]
    log("   chat completion: 200")
    engine_cmd(args, "exec", name, "systemctl", "stop", unit, timeout=40)
    end = show("ActiveState", "Result", "ExecMainStatus")
    assert end == {"ActiveState": "inactive", "Result": "success", "ExecMainStatus": "0"}, end
    log(f"   systemctl stop: {end}")
    journal = engine_cmd(args, "exec", name, "journalctl", "-u", unit, "--no-pager", "-o", "cat")
    for line in journal.stdout.strip().splitlines()[-4:]:
        log(f"   journal: {line[:150]}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--engine", default="podman", choices=["podman", "docker"])
    ap.add_argument("--image", default="localhost/minfer:test")
    ap.add_argument("--build", action="store_true")
    ap.add_argument("--ccache", help="host ccache directory for the build (podman)")
    ap.add_argument("--systemd", action="store_true", help="also check the systemd unit (podman)")
    ap.add_argument("--model", default=os.path.join(REPO, "..", "shared", "models",
                                                   "stories260K.gguf"))
    args = ap.parse_args()
    try:
        engine_cmd(args, "version", timeout=20)
    except (OSError, RuntimeError, subprocess.TimeoutExpired) as e:
        log(f"SKIP: no working {args.engine}: {str(e)[:300]}")
        return SKIP
    if not os.path.isfile(args.model):
        log(f"SKIP: no model {args.model}")
        return SKIP
    if args.build:
        build(args)
    elif not image_exists(args, args.image):
        log(f"SKIP: no image {args.image} (pass --build)")
        return SKIP
    prefix = f"minfer-test-{os.getpid()}"
    names = [f"{prefix}-guard", f"{prefix}-serve", f"{prefix}-systemd"]
    try:
        check_ram_guard(args, names[0])
        port = free_port()
        run_replica(args, names[1], "512m", port)
        check_serving(args, names[1], port)
        check_stop(args, names[1])
        if args.systemd and args.engine == "podman":
            check_systemd(args, names[2])
    finally:
        for name in names:  # only ours, by name; `rm -f` stops one still running
            engine_cmd(args, "rm", "-f", name, check=False, timeout=60)
    log("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
