"""A tiny headless-Chromium driver for the report tests: a DevTools (CDP) session on
127.0.0.1 that loads pages, collects their console errors, uncaught exceptions and failed
loads, and takes a screenshot of each."""

from __future__ import annotations

import asyncio
import base64
import json
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

CHROMIUM = Path("/usr/bin/chromium")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--hide-scrollbars"]


@dataclass
class PageLoad:
    errors: list[str] = field(default_factory=list)
    facts: dict = field(default_factory=dict)
    screenshot: bytes = b""


class _Cdp:
    def __init__(self, ws):
        self.ws, self.next_id, self.events = ws, 0, []

    async def call(self, method: str, **params) -> dict:
        self.next_id += 1
        my_id = self.next_id
        await self.ws.send_json({"id": my_id, "method": method, "params": params})
        while True:
            msg = json.loads((await self.ws.receive(timeout=60)).data)
            if msg.get("id") == my_id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            self.events.append(msg)

    async def wait_event(self, name: str, timeout: float = 60) -> None:
        if any(e.get("method") == name for e in self.events):
            return
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            msg = json.loads((await self.ws.receive(timeout=deadline - time.monotonic())).data)
            self.events.append(msg)
            if msg.get("method") == name:
                return
        raise TimeoutError(name)

    async def drain(self, seconds: float) -> None:
        try:
            while True:
                msg = await self.ws.receive(timeout=seconds)
                self.events.append(json.loads(msg.data))
        except TimeoutError:
            return


PROBE = """JSON.stringify({
  title: document.title,
  images: Array.from(document.images).map(i => [i.complete, i.naturalWidth, i.naturalHeight]),
  banner: (document.getElementById('emulated-banner') || {}).innerText || null,
  tables: document.querySelectorAll('table').length,
  scripts: document.querySelectorAll('script').length,
  height: document.documentElement.scrollHeight,
  // lines each run id is laid out on (one box per line)
  run_id_lines: Array.from(document.querySelectorAll('code.run-id'))
                     .map(c => c.getClientRects().length),
  sections: Object.fromEntries(Array.from(document.querySelectorAll('section[id]'))
                               .map(s => [s.id, s.innerText.slice(0, 4000)]))
})"""


def _errors(events: list[dict]) -> list[str]:
    out = []
    for e in events:
        method, p = e.get("method"), e.get("params", {})
        if method == "Runtime.exceptionThrown":
            out.append(f"exception: {p['exceptionDetails'].get('text')}")
        elif method == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
            out.append("console.error: " + " ".join(str(a.get("value")) for a in p.get("args", [])))
        elif method == "Log.entryAdded" and p["entry"].get("level") == "error":
            out.append(f"log: {p['entry'].get('text')} {p['entry'].get('url', '')}")
    return out


async def _load(port: int, urls: list[str]) -> list[PageLoad]:
    out = []
    async with aiohttp.ClientSession() as http:
        async with http.get(f"http://127.0.0.1:{port}/json/list") as resp:
            targets = await resp.json()
        ws_url = next(t["webSocketDebuggerUrl"] for t in targets if t["type"] == "page")
        async with http.ws_connect(ws_url, max_msg_size=0) as ws:
            cdp = _Cdp(ws)
            for domain in ("Runtime", "Log", "Page"):
                await cdp.call(f"{domain}.enable")
            await cdp.call("Emulation.setDeviceMetricsOverride", width=1400, height=1800,
                           deviceScaleFactor=1, mobile=False)
            for url in urls:
                cdp.events = []
                await cdp.call("Page.navigate", url=url)
                await cdp.wait_event("Page.loadEventFired")
                await cdp.drain(0.5)
                probe = await cdp.call("Runtime.evaluate", expression=PROBE, returnByValue=True)
                shot = await cdp.call("Page.captureScreenshot", format="png")
                out.append(PageLoad(errors=_errors(cdp.events),
                                    facts=json.loads(probe["result"]["value"]),
                                    screenshot=base64.b64decode(shot["data"])))
    return out


def load_page(page: Path, profile: Path) -> PageLoad:
    """Open `page` in headless Chromium over CDP (127.0.0.1 only) and report what happened."""
    return load_pages([page], profile)[0]


def load_pages(pages: list[Path], profile: Path) -> list[PageLoad]:
    """Open each page in turn in one headless Chromium, over CDP on 127.0.0.1."""
    cmd = [str(CHROMIUM), *FLAGS, f"--user-data-dir={profile}", "--remote-debugging-port=0",
           "--remote-debugging-address=127.0.0.1", "about:blank"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        port_file = profile / "DevToolsActivePort"
        deadline = time.monotonic() + 60
        while not (port_file.exists() and port_file.read_text().strip()):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"chromium did not open its DevTools port (rc={proc.poll()})")
            time.sleep(0.1)
        port = int(port_file.read_text().split()[0])
        return asyncio.run(_load(port, [p.resolve().as_uri() for p in pages]))
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
