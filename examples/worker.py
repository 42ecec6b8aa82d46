#!/usr/bin/env python3
"""A reprise pull worker in Python, standard library only, to leave running.

It registers a pull step, then claims the step's tasks from a reprise
server, does the work and reports the outcome, until SIGINT or SIGTERM:

    reprise server &
    python3 examples/worker.py --step text.upper &
    curl -s localhost:7420/v1/runs -d '{"step": "text.upper", "input": {"text": "hi"}}'

The work upper-cases input["text"]. An input with "fail_until_attempt": N
fails attempts 1..N with a retryable "Flaky" error, so that the step's
policy retries it; "sleep_ms": N makes each attempt take that long.

While the work runs, a thread heartbeats the task's lease every third of
the lease. A worker that does not heartbeat in time loses the lease: the
engine fails the attempt as WorkerLost and the policy retries it. A result
the server then refuses with 409 (lease lost) or 404 (no such task) is
logged and dropped.

The server may go away and come back (a restart, a deploy, a proxy in
between). A call that cannot reach it (connection refused or reset, a
timeout, a 5xx answer such as a proxy's 502, 503 or 504) is tried again
after a wait that doubles from 0.2 s to 10 s, less a random part of up to
half, for as long as it takes; the outage is logged once, and its end. A
result is sent until the server answers. A restarted server keeps its
steps in its database, so the step is registered again only when a claim
answers that the server does not know it (a new database, say).

SIGINT or SIGTERM stops the worker and it exits 0: a claim waiting for
tasks is dropped at once (a task claimed in that very instant is retried
when its lease lapses); a task at work is finished and its result sent,
but not tried again if the server is away (the engine then retries the
attempt when its lease lapses). A second signal stops it at once.
"""

import argparse
import calendar
import contextlib
import http.client
import json
import os
import random
import re
import signal
import socket
import sys
import threading
import time
import urllib.error
import urllib.request

BACKOFF_FIRST = 0.2  # seconds before the first retry of a call the server did not answer
BACKOFF_MAX = 10.0  # the longest wait between two tries
CALL_TIMEOUT = 15  # seconds a call other than a claim may take


def log(msg):
    print(msg, file=sys.stderr, flush=True)


class Problem(Exception):
    """An error answer of the API (application/problem+json)."""

    def __init__(self, status, body):
        super().__init__(f"{status}: {body}")
        self.status = status
        try:
            problem = json.loads(body)
        except ValueError:
            problem = None
        if not isinstance(problem, dict):
            problem = {}
        self.field = str(problem.get("field", ""))
        self.detail = str(problem.get("detail", body))


class GaveUp(Exception):
    """The server could not be reached, and the caller stopped waiting."""


class Client:
    """Calls the API, trying again while the server cannot be reached."""

    def __init__(self, server, token):
        self.server = server.rstrip("/")
        self.token = token
        self.lock = threading.Lock()
        self.down_since = None  # time.monotonic() when the outage began

    def post(self, path, body, timeout, pause):
        """POSTs body to path until the server answers; returns the answer.

        An error answer raises Problem. When the server cannot be reached,
        or answers 5xx, the call is tried again after pause(seconds), with
        a backoff; pause returns False to give up, which raises GaveUp.
        """
        delay = BACKOFF_FIRST
        while True:
            try:
                answer = self.post_once(path, body, timeout)
            except Problem as e:
                if e.status < 500:
                    self.reached()
                    raise
                err = e
            except (OSError, http.client.HTTPException, ValueError) as e:
                err = e  # refused, reset, timed out, cut short, not JSON
            else:
                self.reached()
                return answer
            self.unreachable(err)
            if not pause(random.uniform(delay / 2, delay)):
                raise GaveUp(err)
            delay = min(delay * 2, BACKOFF_MAX)

    def post_once(self, path, body, timeout):
        req = urllib.request.Request(
            self.server + path,
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        if self.token:
            req.add_header("Authorization", "Bearer " + self.token)
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                return json.load(resp)
        except urllib.error.HTTPError as e:
            with e:
                raise Problem(e.code, e.read().decode(errors="replace")) from None

    def unreachable(self, err):
        """Logs the start of an outage, once whichever thread meets it."""
        with self.lock:
            if self.down_since is not None:
                return
            self.down_since = time.monotonic()
        why = getattr(err, "reason", None) or err
        log(f"server {self.server} unreachable ({why}); trying again until it answers")

    def reached(self):
        """Logs the end of an outage."""
        with self.lock:
            if self.down_since is None:
                return
            down, self.down_since = time.monotonic() - self.down_since, None
        log(f"server {self.server} answers again, after {down:.1f} s")


class Stop(Exception):
    """SIGINT or SIGTERM, raised where the worker may stop at once."""


class Stopper:
    """Turns SIGINT and SIGTERM into a clean stop.

    The handler, which Python runs in the main thread, notes the request;
    it raises Stop only inside at_once(), around waits that may be dropped
    (a claim, a backoff), and not amid work or the sending of its result,
    unless the signal is the second.
    """

    def __init__(self):
        self.requested = False
        self.depth = 0

    def handle(self, signum, frame):
        again = self.requested
        self.requested = True
        if self.depth or again:
            raise Stop()

    @contextlib.contextmanager
    def at_once(self):
        """A block that a stop signal interrupts, raising Stop."""
        if self.requested:
            raise Stop()
        self.depth += 1
        try:
            if self.requested:  # the signal came just before depth rose
                raise Stop()
            yield
        finally:
            self.depth -= 1

    def pause(self, seconds):
        """Waits between two tries of a call; False, at once, on a stop signal."""
        try:
            with self.at_once():
                time.sleep(seconds)
        except Stop:
            return False
        return True


def unix_time(rfc3339):
    """The Unix time of a time of the API ("2026-01-02T03:04:05.123456789Z")."""
    m = re.fullmatch(r"(\d+)-(\d+)-(\d+)T(\d+):(\d+):(\d+)(\.\d+)?(Z|([+-])(\d+):(\d+))", rfc3339)
    if not m:
        raise ValueError(f"not an RFC 3339 time: {rfc3339!r}")
    t = calendar.timegm(tuple(int(g) for g in m.group(1, 2, 3, 4, 5, 6)))
    t += float(m.group(7) or 0)
    if m.group(9):
        offset = int(m.group(10)) * 3600 + int(m.group(11)) * 60
        t -= offset if m.group(9) == "+" else -offset
    return t


def heartbeat(api, task, done, lost):
    """Heartbeats the task's lease until done is set; sets lost on a 409 or 404."""
    # Every third of the lease, as measured by this machine's clock: the
    # server's should agree with it within a fraction of the lease.
    every = max((unix_time(task["lease_until"]) - time.time()) / 3, 0.1)
    path = f"/v1/tasks/{task['id']}/heartbeat"
    while not done.wait(every):
        try:
            api.post(path, {"token": task["token"]}, CALL_TIMEOUT, lambda s: not done.wait(s))
        except GaveUp:  # the work is done
            return
        except Problem as e:
            if e.status in (404, 409):
                lost.set()
            else:
                log(f"heartbeat of task {task['id']}: {e}")
            return


def work(task, lost):
    """The step itself: returns the output or raises.

    lost is set if the lease is lost meanwhile: the result would be
    refused, and work that takes a while may stop early.
    """
    data = task["input"] or {}
    if data.get("sleep_ms"):
        lost.wait(data["sleep_ms"] / 1000)  # stands for work that takes a while
    if task["attempt"] <= data.get("fail_until_attempt", 0):
        raise RuntimeError(f"flaky on attempt {task['attempt']}")
    return {"upper": str(data.get("text", "")).upper(), "attempt": task["attempt"]}


def run_task(api, stopper, task):
    """Works on a claimed task under heartbeats, and sends its result."""
    what = f"{task['run_id']} {task['step']} attempt {task['attempt']}"
    log(f"claimed {what}")
    done, lost = threading.Event(), threading.Event()
    threading.Thread(target=heartbeat, args=(api, task, done, lost), daemon=True).start()
    try:
        output = work(task, lost)
    except Exception as e:  # every failure is reported, for the policy to decide
        report = {"type": "Flaky", "message": str(e), "retryable": True}
        outcome, verb, body = "failed", "fail", {"token": task["token"], "error": report}
    else:
        outcome, verb, body = "completed", "complete", {"token": task["token"], "output": output}
    finally:
        done.set()
    if lost.is_set():
        log(f"{what}: lease lost; result dropped, the engine retries the attempt")
        return
    try:
        api.post(f"/v1/tasks/{task['id']}/{verb}", body, CALL_TIMEOUT, stopper.pause)
    except GaveUp:
        log(f"{what}: stopping before the result could be sent; the engine retries the attempt when its lease lapses")
        return
    except Problem as e:
        if e.status in (404, 409):
            log(f"{what}: lease lost ({e.status}: {e.detail}); result dropped, the engine retries the attempt")
        else:
            log(f"{what}: the server refused the result ({e}); dropped")
        return
    log(f"{outcome} {what}")


def seconds(s):
    """A number of seconds, with or without an "s"."""
    return float(s[:-1] if s.endswith("s") else s)


def main():
    stopper = Stopper()
    signal.signal(signal.SIGINT, stopper.handle)
    signal.signal(signal.SIGTERM, stopper.handle)
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--server", default=os.environ.get("REPRISE_SERVER", "http://127.0.0.1:7420"))
    p.add_argument("--token", default=os.environ.get("REPRISE_TOKEN", ""))
    p.add_argument("--step", default="text.upper")
    p.add_argument("--policy", default="[retry: 3, backoff: 100ms] [timeout: 1m]")
    p.add_argument("--worker", default=f"py-{socket.gethostname()}-{os.getpid()}")
    p.add_argument("--wait", type=seconds, default=10.0, help="long-poll wait of each claim, in seconds")
    p.add_argument("--max-tasks", type=int, default=0, help="exit after this many tasks (0: never)")
    args = p.parse_args()

    api = Client(args.server, args.token)
    step = {"name": args.step, "kind": "pull", "policy": args.policy}
    claim = {"worker": args.worker, "steps": [args.step], "max": 1, "wait": f"{args.wait:g}s"}
    registered, done = False, 0
    try:
        while args.max_tasks == 0 or done < args.max_tasks:
            with stopper.at_once():
                if not registered:
                    s = api.post("/v1/steps", step, CALL_TIMEOUT, stopper.pause)
                    log(f"registered step {s['name']} version {s['version']}")
                    registered = True
                try:
                    tasks = api.post("/v1/tasks/claim", claim, args.wait + CALL_TIMEOUT, stopper.pause)["tasks"]
                except Problem as e:
                    if e.status != 400 or not e.field.startswith("steps"):
                        raise
                    log(f"the server does not know the step ({e.detail}); registering it again")
                    registered = False
                    continue
            for task in tasks:
                done += 1
                run_task(api, stopper, task)
    except (Stop, GaveUp):
        pass
    except Problem as e:
        sys.exit(f"worker.py: {e}")
    log("stopped")


if __name__ == "__main__":
    main()
