"""Headless Chromium driven over its DevTools pipe, with the standard library only: the browser tests
(``test_rule_site``, ``test_serve``) open pages, type, click, pick files and read the DOM with it."""

from __future__ import annotations

import fcntl
import json
import os
import select
import shutil
import subprocess
import time
from pathlib import Path

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]


class Browser:
    """Headless Chromium over ``--remote-debugging-pipe``: DevTools commands on fd 3, replies on fd 4,
    each a JSON text ended by a NUL byte."""

    def __init__(self, profile: Path) -> None:
        assert Path(CHROMIUM).exists(), "Chromium is missing: install it with `apt-get install -y chromium`"
        cmd_r, self.cmd_w = os.pipe()
        self.out_r, out_w = os.pipe()

        def wire() -> None:  # in the child: the pipe ends at fds 3 and 4, kept across exec
            a, b = fcntl.fcntl(cmd_r, fcntl.F_DUPFD, 10), fcntl.fcntl(out_w, fcntl.F_DUPFD, 10)
            os.dup2(a, 3)
            os.dup2(b, 4)

        self.proc = subprocess.Popen([CHROMIUM, *FLAGS, "--remote-debugging-pipe", f"--user-data-dir={profile}",
                                      "about:blank"], preexec_fn=wire, close_fds=False,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(cmd_r)
        os.close(out_w)
        self.buf = b""
        self.next_id = 0
        self.events: list[dict] = []
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Log"):
            self.send(f"{domain}.enable", session=True)

    def _read(self, deadline: float) -> dict:
        while b"\0" not in self.buf:
            ready, _, _ = select.select([self.out_r], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                raise TimeoutError("Chromium did not answer")
            chunk = os.read(self.out_r, 1 << 16)
            if not chunk:
                raise EOFError("Chromium closed its DevTools pipe")
            self.buf += chunk
        msg, _, self.buf = self.buf.partition(b"\0")
        return json.loads(msg)

    def send(self, method: str, params: dict | None = None, session: bool = False, timeout_s: float = 90) -> dict:
        self.next_id += 1
        msg: dict = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = self.session
        os.write(self.cmd_w, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout_s
        while True:
            reply = self._read(deadline)
            if reply.get("id") == self.next_id:
                assert "error" not in reply, (method, reply["error"])
                return reply.get("result", {})
            self.events.append(reply)

    def js(self, expression: str) -> object:
        res = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True}, session=True)
        assert "exceptionDetails" not in res, res
        return res["result"].get("value")

    def wait_for(self, expression: str, timeout_s: float = 30) -> object:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                value = self.js(expression)
            except AssertionError as e:  # the page navigated while it was asked: ask the next page
                if "navigated or closed" not in str(e) and "Cannot find context" not in str(e):
                    raise
                value = None
            if value:
                return value
            assert time.monotonic() < deadline, f"timed out waiting for {expression}"
            time.sleep(0.1)

    def open(self, url: str) -> None:
        self.send("Page.navigate", {"url": url}, session=True)
        self.wait_for(f"location.href === {json.dumps(url)} && document.readyState === 'complete'")

    def problems(self) -> list[str]:
        """Script exceptions, console errors and refused loads (CSP) seen so far."""
        out = []
        for e in self.events:
            method, p = e.get("method"), e.get("params", {})
            if method == "Runtime.exceptionThrown":
                out.append(json.dumps(p.get("exceptionDetails", {}))[:300])
            elif method == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
                out.append(p["entry"].get("text", "")[:300])
            elif method == "Runtime.consoleAPICalled" and p.get("type") == "error":
                out.append(json.dumps(p.get("args", []))[:300])
        return out

    def close(self) -> None:
        try:
            self.send("Browser.close", timeout_s=10)
        except (AssertionError, OSError, TimeoutError, EOFError):
            pass
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self.cmd_w)
        os.close(self.out_r)

    def set_files(self, selector: str, paths: list[Path]) -> None:
        """Pick ``paths`` in the page's file input at ``selector``, as a person choosing them would."""
        root = self.send("DOM.getDocument", {"depth": 0}, session=True)["root"]["nodeId"]
        node = self.send("DOM.querySelector", {"nodeId": root, "selector": selector}, session=True)["nodeId"]
        assert node, f"no element {selector}"
        self.send("DOM.setFileInputFiles", {"nodeId": node, "files": [str(p) for p in paths]}, session=True)
