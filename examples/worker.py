#!/usr/bin/env python3
"""A reprise pull worker in Python, standard library only.

It registers a pull step, then claims its tasks from a reprise server,
does the work and reports the outcome:

    reprise server &
    python3 examples/worker.py --step text.upper &
    curl -s localhost:7420/v1/runs -d '{"step": "text.upper", "input": {"text": "hi"}}'

The work upper-cases input["text"]. An input with "fail_until_attempt": N
fails attempts 1..N with a retryable "Flaky" error, so that the step's
policy retries it. A result sent after the lease lapsed gets 409: the
engine has already failed that attempt as a Timeout and will retry it.
"""

import argparse
import json
import os
import socket
import sys
import urllib.error
import urllib.request


class Problem(Exception):
    """An error answer of the API (application/problem+json)."""

    def __init__(self, status, body):
        super().__init__(f"{status}: {body}")
        self.status = status
        self.body = body


class Client:
    def __init__(self, server, token):
        self.server = server.rstrip("/")
        self.token = token

    def post(self, path, body, timeout=70):
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
            raise Problem(e.code, e.read().decode(errors="replace")) from None


def work(task):
    """The step itself: returns the output or raises."""
    data = task["input"] or {}
    if task["attempt"] <= data.get("fail_until_attempt", 0):
        raise RuntimeError(f"flaky on attempt {task['attempt']}")
    return {"upper": str(data.get("text", "")).upper(), "attempt": task["attempt"]}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--server", default=os.environ.get("REPRISE_SERVER", "http://127.0.0.1:7420"))
    p.add_argument("--token", default=os.environ.get("REPRISE_TOKEN", ""))
    p.add_argument("--step", default="text.upper")
    p.add_argument("--policy", default="[retry: 3, backoff: 100ms] [timeout: 1m]")
    p.add_argument("--worker", default=f"py-{socket.gethostname()}-{os.getpid()}")
    p.add_argument("--wait", default="10s", help="long-poll wait of each claim")
    p.add_argument("--max-tasks", type=int, default=0, help="exit after this many tasks (0: never)")
    args = p.parse_args()

    api = Client(args.server, args.token)
    api.post("/v1/steps", {"name": args.step, "kind": "pull", "policy": args.policy})
    done = 0
    while args.max_tasks == 0 or done < args.max_tasks:
        claim = {"worker": args.worker, "steps": [args.step], "max": 1, "wait": args.wait}
        for task in api.post("/v1/tasks/claim", claim)["tasks"]:
            done += 1
            path = f"/v1/tasks/{task['id']}"
            try:
                output = work(task)
            except Exception as e:  # every failure is reported, for the policy to decide
                report = {"type": "Flaky", "message": str(e), "retryable": True}
                outcome, body = "failed", {"token": task["token"], "error": report}
                verb = "fail"
            else:
                outcome, body = "completed", {"token": task["token"], "output": output}
                verb = "complete"
            try:
                api.post(f"{path}/{verb}", body)
                print(f"{outcome} {task['run_id']} {task['step']} attempt {task['attempt']}", file=sys.stderr)
            except Problem as e:
                if e.status != 409:
                    raise
                print(f"lease lost on {task['run_id']} attempt {task['attempt']}; the engine retries it", file=sys.stderr)


if __name__ == "__main__":
    main()
