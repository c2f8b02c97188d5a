"""Opens the built documentation site (site/, from `make docs`) in a real browser, headless
Chromium from Debian (chromium-headless-shell), as a reader would: the front page, a guide and an
API reference page. Each must load with the site's navigation, its stylesheet and its own
content; a screenshot of each goes to build/docs-browser/ (CI keeps them as artifacts).

    python tools/docs_browser_check.py [--site site] [--out build/docs-browser]

The site is served by Python's http.server on 127.0.0.1 (a free port), as `make docs-serve`
would serve it. Exit status 1, naming the page and what it lacked, when a check fails.
"""
import argparse
import functools
import http.server
import os
import re
import shutil
import subprocess
import sys
import threading

# page, what its own content must show (besides the navigation every page has)
PAGES = [
    ("", "front page", ["Getting started", "What it is measured at"]),
    ("guides/transformers/", "guide", ["Decoder LLMs with a KV cache", "The generation loop"]),
    ("reference/python/", "API reference", ["pt2onnx.export", "dynamic_shapes"]),
]
# The navigation: Material's primary nav with the site's sections.
NAV = ['class="md-nav md-nav--primary"', "Guides", "Reference", "Benchmarks"]


def browser():
    for name in ("chromium-headless-shell", "chromium", "chromium-browser"):
        path = shutil.which(name) or (f"/usr/lib/chromium/{name}"
                                      if os.path.exists(f"/usr/lib/chromium/{name}") else None)
        if path:
            return path
    sys.exit("docs browser check: no headless Chromium (apt-get install chromium-headless-shell; "
             "`make docs-browser-check` installs it)")


def chrome(exe, *args):
    cmd = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
           "--hide-scrollbars", "--window-size=1280,900", "--virtual-time-budget=5000", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--site", default="site")
    ap.add_argument("--out", default=os.path.join("build", "docs-browser"))
    a = ap.parse_args()
    if not os.path.exists(os.path.join(a.site, "index.html")):
        sys.exit(f"docs browser check: {a.site}/index.html not found (run `make docs` first)")
    os.makedirs(a.out, exist_ok=True)
    requested = []

    class Handler(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):  # what the browser asked for, instead of a log line
            requested.append(self.path)

    handler = functools.partial(Handler, directory=a.site)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}/"
    exe, failures = browser(), []
    try:
        for path, what, content in PAGES:
            url = base + path
            del requested[:]
            p = chrome(exe, "--dump-dom", url)
            dom = p.stdout
            title = re.search(r"<title>(.*?)</title>", dom, re.S)
            missing = [s for s in NAV + content if s not in dom]
            # The browser fetched the theme's stylesheet and script and ran the script (it asks
            # for the search index).
            for asset in ("/assets/stylesheets/main.", "/assets/javascripts/bundle.",
                          "/search/search_index.json"):
                if not any(r.startswith(asset) for r in requested):
                    missing.append(f"a request for {asset}*")
            shot = os.path.join(a.out, (path.strip("/").replace("/", "_") or "index") + ".png")
            s = chrome(exe, f"--screenshot={os.path.abspath(shot)}", url)
            size = os.path.getsize(shot) if os.path.exists(shot) else 0
            if size < 20_000:  # a blank or unstyled page compresses to a few KB
                missing.append(f"a rendered screenshot ({size} bytes; {s.stderr.strip()[-200:]})")
            status = "ok" if not missing else "FAILED: lacks " + "; ".join(missing)
            print(f"{what:14} {url} title={title.group(1).strip() if title else None!r} "
                  f"screenshot={shot} ({size} bytes): {status}")
            if missing:
                failures.append(f"{what} ({url}): {', '.join(missing)}")
    finally:
        server.shutdown()
    if failures:
        sys.exit("docs browser check failed:\n  " + "\n  ".join(failures))


if __name__ == "__main__":
    main()
