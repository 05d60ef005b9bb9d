#!/usr/bin/env python3
"""Two `minfer serve` replicas behind nginx on loopback, with deploy/nginx/minfer.conf itself.

    tests/deploy/nginx_test.py --minfer build/minfer --model ../shared/models/stories260K.gguf
                               [--conf deploy/nginx/minfer.conf] [--json OUT.json]

Run by ctest (tests/CMakeLists.txt, label deploy); exit status 77 (a skip) where nginx or the
model is absent. Three phases, each 8 conversations (session keys) with a long system prompt
of their own: one priming request per conversation, then 32 concurrent streaming chat requests
(4 per conversation):
  affinity     with an X-Session-Id header: 0 errors, complete SSE streams, every session's
               requests answered by one replica (X-Minfer-Upstream), every burst request reusing
               its conversation's prefix (usage.cached_tokens), and the replicas' /metrics
               cached-token counters equal to what their answers reported;
  no affinity  the same without the header (least connections): the prefix-cache hit rate to
               compare (docs/DEPLOY.md);
  failover     the affinity sessions again, and SIGTERM to the replica holding most of them as
               soon as its first stream has begun: every request still completes (those queued
               there are answered 503 before any byte and nginx resends them to the other
               replica; those streaming there finish), and the stopped replica exits 0.
Everything binds 127.0.0.1 on free ports; nginx runs as the current user from its own prefix
(conf, pid, logs, temp dirs) in a temporary directory, removed at the end; only the PIDs this
script started are signalled; every wait is bounded in count and time.
"""
import argparse
import http.client
import json
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

SKIP = 77
N_SESSIONS = 8
PER_SESSION = 4
BLOCK = 16  # KV block size: the prefix cache reuses whole blocks
STORY = ("Once upon a time, there was a little girl named Lily. She loved to play outside in "
         "the park with her big red ball. One day, she saw a small dog sitting under a tree. "
         "The dog was sad because he had lost his way home. Lily wanted to help the dog, so "
         "she gave him some of her bread and asked him where he lived. ")
T0 = time.monotonic()
TOTAL_BUDGET_S = 120.0  # the whole test; every wait below is also bounded on its own


def log(msg):
    print(f"[{time.monotonic() - T0:6.2f}s] {msg}", flush=True)


def time_left():
    return TOTAL_BUDGET_S - (time.monotonic() - T0)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(port, path, timeout=5.0):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", path)
        r = conn.getresponse()
        return r.status, r.read().decode()
    finally:
        conn.close()


def http_post_json(port, path, body, timeout=10.0):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("POST", path, body=json.dumps(body),
                     headers={"Content-Type": "application/json"})
        r = conn.getresponse()
        return r.status, json.loads(r.read().decode())
    finally:
        conn.close()


def tail(path, n=2000):
    try:
        with open(path, "rb") as f:
            return f.read()[-n:].decode(errors="replace")
    except OSError:
        return ""


class Replica:
    """A `minfer serve` child on 127.0.0.1:<free port> (--port 0, the port read from stdout)."""

    def __init__(self, minfer, model, tmp, idx):
        self.out_path = os.path.join(tmp, f"replica{idx}.out")
        self.err_path = os.path.join(tmp, f"replica{idx}.err")
        with open(self.out_path, "wb") as out, open(self.err_path, "wb") as err:
            self.proc = subprocess.Popen(
                [minfer, "serve", "-m", model, "--host", "127.0.0.1", "--port", "0", "-t", "1",
                 "-np", "4", "-c", "4096", "--metrics", "--chat-template", "chatml"],
                stdin=subprocess.DEVNULL, stdout=out, stderr=err)
        self.port = None
        for _ in range(400):  # 20 s
            with open(self.out_path) as f:
                m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", f.read())
            if m:
                self.port = int(m.group(1))
                break
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        if self.port is None:
            raise RuntimeError(f"replica {idx} did not start: {tail(self.err_path)}")
        self.addr = f"127.0.0.1:{self.port}"

    def wait_ready(self):
        for _ in range(400):  # 20 s
            try:
                if http_get(self.port, "/health", 1.0)[0] == 200:
                    return
            except OSError:
                pass
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        raise RuntimeError(f"replica {self.addr} not ready: {tail(self.err_path)}")

    def metrics(self):
        status, text = http_get(self.port, "/metrics")
        assert status == 200, f"/metrics on {self.addr}: {status}"
        out = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, value = line.rsplit(" ", 1)
                out[name.split("minfer:", 1)[-1]] = float(value)
        return out

    def signal(self, sig):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)

    def stop(self, timeout=15.0):
        """SIGTERM, then the exit status (SIGKILL after `timeout`: None)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
            return None


class Nginx:
    """nginx in the foreground (its master is our child) from a prefix under `tmp`."""

    def __init__(self, binary, conf_src, tmp, upstreams):
        self.binary = binary
        self.tmp = tmp
        self.err_path = os.path.join(tmp, "error.log")
        text = open(conf_src).read()
        # The shipped file with only its addresses and log paths replaced; each pattern must
        # be there as many times as the file is documented to have it.
        subs = [(r"server 127\.0\.0\.1:8081 ", f"server {upstreams[0]} ", 2),
                (r"server 127\.0\.0\.1:8082 ", f"server {upstreams[1]} ", 2),
                (r"/var/log/nginx/", tmp + "/", 2)]
        for pat, rep, count in subs:
            text, n = re.subn(pat, rep, text)
            assert n == count, f"{conf_src}: {pat!r} found {n} times, expected {count}"
        self.site = text
        self.proc = None
        for _ in range(3):  # a free port can be taken between the probe and nginx's bind
            self.port = free_port()
            if self._start():
                return
        raise RuntimeError(f"nginx did not start: {tail(self.err_path)}")

    def _start(self):
        site, n = re.subn(r"(?m)^    listen 8080;$", f"    listen 127.0.0.1:{self.port};",
                          self.site)
        assert n == 1, "deploy/nginx/minfer.conf: `    listen 8080;` not found once"
        with open(os.path.join(self.tmp, "minfer.conf"), "w") as f:
            f.write(site)
        t = self.tmp
        # Workers run as the current user: only root can (and then must) name one.
        user = f"user {pwd.getpwuid(os.geteuid()).pw_name};\n" if os.geteuid() == 0 else ""
        main = (f"{user}worker_processes 1;\npid {t}/nginx.pid;\nerror_log {t}/error.log warn;\n"
                "events { worker_connections 512; }\n"
                "http {\n"
                f"  client_body_temp_path {t}/client_body;\n  proxy_temp_path {t}/proxy;\n"
                f"  fastcgi_temp_path {t}/fastcgi;\n  uwsgi_temp_path {t}/uwsgi;\n"
                f"  scgi_temp_path {t}/scgi;\n  access_log off;\n"
                f"  include {t}/minfer.conf;\n}}\n")
        conf = os.path.join(t, "nginx.conf")
        with open(conf, "w") as f:
            f.write(main)
        with open(self.err_path, "ab") as err:
            self.proc = subprocess.Popen(
                [self.binary, "-p", t + "/", "-c", conf, "-e", self.err_path, "-g", "daemon off;"],
                stdin=subprocess.DEVNULL, stdout=err, stderr=err)
        for _ in range(200):  # 10 s
            if self.proc.poll() is not None:
                return False
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return True
            except OSError:
                time.sleep(0.05)
        self.stop()
        return False

    def stop(self):
        """Fast shutdown of the master we started; its workers if it does not exit."""
        if not self.proc or self.proc.poll() is not None:
            return
        pid = self.proc.pid
        try:
            with open(f"/proc/{pid}/task/{pid}/children") as f:
                workers = [int(x) for x in f.read().split()]
        except OSError:
            workers = []
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
            for w in workers:
                try:
                    os.kill(w, signal.SIGKILL)
                except ProcessLookupError:
                    pass


def messages_for(phase, k, j):
    system = f"Conversation {phase}{k}. {STORY}" + STORY[::-1][:120]
    user = "Hello." if j < 0 else f"Tell me story number {j}."
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


class Result:
    def __init__(self):
        self.status = None
        self.upstream = ""
        self.content_type = ""
        self.role_first = False
        self.finish = None
        self.done = False
        self.text = ""
        self.cached = None
        self.prompt_tokens = None
        self.error = None
        self.started = threading.Event()  # the first data: line arrived

    def complete(self):
        return (self.error is None and self.status == 200 and self.done and self.role_first
                and self.finish in ("stop", "length")
                and self.content_type.startswith("text/event-stream"))

    def describe(self):
        return (f"status={self.status} upstream={self.upstream!r} done={self.done} "
                f"role_first={self.role_first} finish={self.finish} error={self.error}")


def chat_stream(port, session, messages, max_tokens, res, timeout=30.0):
    headers = {"Content-Type": "application/json"}
    if session:
        headers["X-Session-Id"] = session
    body = {"model": "m", "messages": messages, "stream": True, "max_tokens": max_tokens,
            "temperature": 0, "ignore_eos": True, "stream_options": {"include_usage": True}}
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("POST", "/v1/chat/completions", body=json.dumps(body), headers=headers)
        r = conn.getresponse()
        res.status = r.status
        res.upstream = r.getheader("X-Minfer-Upstream", "")
        res.content_type = r.getheader("Content-Type", "")
        if r.status != 200:
            res.error = r.read(300).decode(errors="replace")
            return
        first = True
        for _ in range(10000):  # lines; a stream here is a few hundred
            line = r.readline()
            if not line:
                break
            line = line.strip()
            if not line.startswith(b"data: "):
                continue
            res.started.set()
            data = line[6:]
            if data == b"[DONE]":
                res.done = True
                break
            ev = json.loads(data)
            if "error" in ev:
                res.error = ev["error"]
                return
            if ev.get("usage"):
                res.cached = ev["usage"]["prompt_tokens_details"]["cached_tokens"]
                res.prompt_tokens = ev["usage"]["prompt_tokens"]
            for ch in ev.get("choices", []):
                delta = ch.get("delta") or {}
                if first:
                    res.role_first = delta.get("role") == "assistant"
                    first = False
                res.text += delta.get("content") or ""
                if ch.get("finish_reason"):
                    res.finish = ch["finish_reason"]
    except Exception as e:  # a reset or a timeout is a failed request, reported by the checks
        res.error = f"{type(e).__name__}: {e}"
    finally:
        res.started.set()
        conn.close()


def run_concurrent(port, jobs, max_tokens, on_started=None):
    """jobs: [(session or None, messages)] -> [Result], all sent at once."""
    results = [Result() for _ in jobs]
    threads = [threading.Thread(target=chat_stream, args=(port, s, m, max_tokens, r))
               for (s, m), r in zip(jobs, results)]
    for t in threads:
        t.start()
    if on_started:
        on_started(results)
    for t in threads:
        t.join(max(1.0, min(60.0, time_left())))
    assert not any(t.is_alive() for t in threads), "requests still running past the budget"
    return results


def prefix_tokens(replica, phase, k, j):
    """Prompt tokens request j of conversation k shares with the conversation's priming one."""
    def ids(jj):
        st, p = http_post_json(replica.port, "/apply-template",
                               {"messages": messages_for(phase, k, jj)})
        assert st == 200, p
        st, t = http_post_json(replica.port, "/tokenize",
                               {"content": p["prompt"], "add_special": True})
        assert st == 200, t
        return t["tokens"]
    a, b = ids(-1), ids(j)
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def cache_phase(nginx, replicas, phase, with_key):
    """One priming request per conversation, then the 32-request burst; returns the figures."""
    key = (lambda k: f"{phase}-session-{k}") if with_key else (lambda k: None)
    prime = run_concurrent(nginx.port, [(key(k), messages_for(phase, k, -1))
                                        for k in range(N_SESSIONS)], 16)
    bad = [r.describe() for r in prime if not r.complete()]
    assert not bad, f"{phase}: priming requests failed: {bad}"
    before = {r.addr: r.metrics() for r in replicas}
    jobs = [(key(k), messages_for(phase, k, j)) for j in range(PER_SESSION)
            for k in range(N_SESSIONS)]
    res = run_concurrent(nginx.port, jobs, 16)
    after = {r.addr: r.metrics() for r in replicas}
    bad = [r.describe() for r in res if not r.complete()]
    assert not bad, f"{phase}: {len(bad)} of {len(res)} requests failed: {bad[:4]}"
    d = {a: {n: after[a][n] - before[a][n] for n in after[a]} for a in after}
    cached = sum(x["prompt_tokens_cached_total"] for x in d.values())
    evaluated = sum(x["prompt_tokens_total"] for x in d.values())
    hits = sum(x["prefix_cache_hits_total"] for x in d.values())
    lookups = sum(x["prefix_cache_lookups_total"] for x in d.values())
    fig = {"requests": len(res), "cached_tokens": cached, "evaluated_tokens": evaluated,
           "hit_rate": cached / max(1.0, cached + evaluated),
           "prefix_cache_block_hits": hits, "prefix_cache_block_lookups": lookups,
           "per_replica_cached": {a: x["prompt_tokens_cached_total"] for a, x in d.items()}}
    # The replicas' counters and the answers agree (the header names the replica that counted).
    by_upstream = {}
    for r in res:
        by_upstream[r.upstream] = by_upstream.get(r.upstream, 0) + r.cached
    for a, x in d.items():
        assert x["prompt_tokens_cached_total"] == by_upstream.get(a, 0), \
            f"{phase}: /metrics of {a} counted {x['prompt_tokens_cached_total']} cached " \
            f"tokens, its answers {by_upstream.get(a, 0)}"
    return res, fig, [p.upstream for p in prime]


def check_affinity(replicas, res, prime_upstreams):
    homes = {}
    for i, r in enumerate(res):
        k = i % N_SESSIONS
        assert r.upstream == prime_upstreams[k], \
            f"session {k}: answered by {r.upstream}, its priming request by {prime_upstreams[k]}"
        homes.setdefault(k, r.upstream)
    # Every burst request found its conversation's prefix on its replica: at least the whole
    # blocks it shares with the priming request.
    for i, r in enumerate(res):
        k, j = i % N_SESSIONS, i // N_SESSIONS
        want = prefix_tokens(replicas[0], "affinity", k, j) // BLOCK * BLOCK
        assert want >= 4 * BLOCK, f"test bug: a shared prefix of only {want} tokens"
        assert r.cached >= want, f"session {k} request {j}: {r.cached} cached tokens, " \
                                 f"{want} expected (on {r.upstream})"
    return homes


def failover_phase(nginx, replicas, homes):
    """The affinity sessions again; SIGTERM to the busier replica once its first stream began."""
    count = {r.addr: 0 for r in replicas}
    for a in homes.values():
        count[a] += 1
    victim = max(replicas, key=lambda r: count[r.addr])
    survivor = next(r for r in replicas if r is not victim)
    stopped_at = []

    def stop_victim(results):
        mine = [r for i, r in enumerate(results) if homes[i % N_SESSIONS] == victim.addr]
        for _ in range(400):  # 20 s
            if any(r.started.is_set() for r in mine):
                break
            time.sleep(0.005)
        victim.signal(signal.SIGTERM)
        stopped_at.append(time.monotonic())
        log(f"failover: SIGTERM to {victim.addr} ({count[victim.addr]} of {N_SESSIONS} "
            f"sessions); streams begun there: {sum(r.started.is_set() for r in mine)}")

    jobs = [(f"affinity-session-{k}", messages_for("affinity", k, 10 + j))
            for j in range(PER_SESSION) for k in range(N_SESSIONS)]
    res = run_concurrent(nginx.port, jobs, 256, on_started=stop_victim)
    bad = [r.describe() for r in res if not r.complete()]
    assert not bad, f"failover: {len(bad)} of {len(res)} requests lost: {bad[:4]}"
    retried = [r for r in res if "," in r.upstream]
    for r in retried:
        assert r.upstream.split(",")[-1].strip() == survivor.addr, r.upstream
    status = victim.stop(15.0)
    assert status == 0, f"the stopped replica exited with {status}: {tail(victim.err_path)}"
    on_victim = sum(1 for r in res if r.upstream == victim.addr)
    fig = {"requests": len(res), "victim_sessions": count[victim.addr],
           "finished_on_victim": on_victim, "retried_on_survivor": len(retried),
           "on_survivor_first_try": sum(1 for r in res if r.upstream == survivor.addr)}
    # Requests were queued behind the victim's 4 slots when it stopped: at least one of them
    # must have been resent, or this phase tested nothing.
    assert retried, f"failover: no request was retried: {fig}"
    return fig


def main():
    ap = argparse.ArgumentParser()
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--minfer", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--conf", default=os.path.join(here, "..", "..", "deploy", "nginx",
                                                   "minfer.conf"))
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args()
    # Debian puts nginx in /usr/sbin, which a user's PATH may lack.
    nginx_bin = shutil.which("nginx", path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin")
    if not nginx_bin:
        print("SKIP: nginx is not installed (scripts/deps.sh --test installs it)")
        return SKIP
    if not os.path.exists(args.model):
        print(f"SKIP: {args.model} absent")
        return SKIP
    tmp = tempfile.mkdtemp(prefix="minfer-deploy-")
    replicas, nginx = [], None
    ok = False
    try:
        replicas = [Replica(args.minfer, args.model, tmp, i) for i in range(2)]
        for r in replicas:
            r.wait_ready()
        nginx = Nginx(nginx_bin, args.conf, tmp, [r.addr for r in replicas])
        log(f"replicas {[r.addr for r in replicas]}, nginx 127.0.0.1:{nginx.port}")
        res, aff, prime_up = cache_phase(nginx, replicas, "affinity", True)
        homes = check_affinity(replicas, res, prime_up)
        log(f"affinity: {json.dumps(aff)}")
        _, noaff, _ = cache_phase(nginx, replicas, "noaffinity", False)
        log(f"no affinity: {json.dumps(noaff)}")
        assert aff["hit_rate"] >= noaff["hit_rate"], (aff, noaff)
        fail = failover_phase(nginx, replicas, homes)
        log(f"failover: {json.dumps(fail)}")
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"affinity": aff, "no_affinity": noaff, "failover": fail}, f, indent=1)
        ok = True
    finally:
        if nginx:
            nginx.stop()
        for r in replicas:
            r.stop()
        if not ok:
            for r in replicas:
                print(f"--- {r.addr} stderr:\n{tail(r.err_path)}")
            print(f"--- nginx error.log:\n{tail(os.path.join(tmp, 'error.log'))}")
        shutil.rmtree(tmp, ignore_errors=True)
    log("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
