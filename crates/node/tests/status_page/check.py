"""Loads the status page of a live node in headless Chromium (WebDriver, through selenium and
Debian's chromedriver) and checks what a person sees: every namespace with its kind, the
numbers of one that served ids, the version, the authority, the self-refresh; the graphics as
drawn: each sequence namespace's bar of id space used laid out with a width (the used part of
the one near its end nearly full and red), its sparklines with points, each snowflake's worker
pool, the block run.sh asked of tickets_odd under "to nodes below"; and no message on the browser's
console. With --screenshot PATH it also saves what the browser shows.

    python3 check.py http://127.0.0.1:PORT [--screenshot docs/status-page.png]
"""

import argparse
import base64
import json
import sys
import tempfile
import urllib.request

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("base")
    parser.add_argument("--screenshot")
    args = parser.parse_args()

    served = json.load(urllib.request.urlopen(args.base + "/v1/namespaces"))["namespaces"]
    kinds = {ns["namespace"]: ns["kind"] for ns in served}
    fractions = {
        ns["namespace"]: ns["state"]["used_fraction"] for ns in served if ns["kind"] == "sequence"
    }

    with tempfile.TemporaryDirectory() as profile:
        driver = chromium(profile)
        try:
            driver.get(args.base + "/")
            failures = check(driver, kinds, fractions, loaded=bool(args.screenshot))
            driver.get(args.base + "/ui")
            if driver.find_element(By.TAG_NAME, "h1").text != "idmint status":
                failures.append("/ui is not the status page")
            if args.screenshot:
                driver.get(args.base + "/")
                # The whole page, not only the window: Chrome's own full-page capture.
                size = driver.execute_cdp_cmd("Page.getLayoutMetrics", {})["cssContentSize"]
                shot = driver.execute_cdp_cmd("Page.captureScreenshot", {
                    "format": "png",
                    "captureBeyondViewport": True,
                    "clip": {"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1},
                })
                with open(args.screenshot, "wb") as out:
                    out.write(base64.b64decode(shot["data"]))
        finally:
            driver.quit()

    for f in failures:
        print("FAIL:", f, file=sys.stderr)
    passed = 1 if not failures else 0
    print(f"status page: {passed} passed, {1 - passed} failed")
    return 0 if not failures else 1


def chromium(profile):
    """Headless Chromium with a fresh profile in `profile`, through Debian's chromedriver."""
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    for flag in [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--no-first-run",
        f"--user-data-dir={profile}",
        "--window-size=1500,900",
    ]:
        options.add_argument(flag)
    return webdriver.Chrome(options=options, service=Service("/usr/bin/chromedriver"))


def check(driver, kinds, fractions, loaded):
    failures = []
    if driver.title != "idmint status":
        failures.append(f"title is {driver.title!r}")
    refresh = driver.find_elements(By.CSS_SELECTOR, 'meta[http-equiv="refresh"]')
    if not refresh or refresh[0].get_attribute("content") != "5":
        failures.append("the page does not refresh itself every 5 s")
    summary = driver.find_element(By.ID, "summary").text
    if "version " not in summary or " up " not in summary:
        failures.append(f"no version or uptime: {summary!r}")
    authority = driver.find_element(By.ID, "authority").text
    if "file" not in authority or "answering" not in authority:
        failures.append(f"authority line: {authority!r}")
    for name, kind in kinds.items():
        rows = driver.find_elements(By.ID, f"ns-{name}")
        if not rows:
            failures.append(f"namespace {name} has no row")
            continue
        cells = [c.text for c in rows[0].find_elements(By.TAG_NAME, "td")]
        if cells[:2] != [name, kind]:
            failures.append(f"{name}: row starts {cells[:2]}, want {[name, kind]}")
    photos = [c.text for c in driver.find_element(By.ID, "ns-photos").find_elements(By.TAG_NAME, "td")]
    # namespace, kind, settings, watermark, buffered, demand, block, served, burned, given back,
    # used, runs out
    if not photos[2].startswith("width 64, start 1, step 1"):
        failures.append(f"photos settings: {photos[2]!r}")
    if photos[7] != "25":
        failures.append(f"photos served {photos[7]!r}, want 25 (the ids run.sh asked for)")
    if "%" not in photos[10]:
        failures.append(f"photos id space used: {photos[10]!r}")
    if not driver.find_elements(By.CSS_SELECTOR, "#ns-legacy_users .warn"):
        failures.append("legacy_users (32-bit, warning horizon 100 years) is not shown in red")
    if driver.find_elements(By.CSS_SELECTOR, "#ns-photos .warn"):
        failures.append("photos (64-bit) is shown in red")
    failures += check_graphics(driver, kinds, fractions, loaded)
    return failures


def check_graphics(driver, kinds, fractions, loaded):
    """The SVG as Chromium lays it out, not only as the HTML says. `loaded`: run.sh drove
    minutes of load on orders (--screenshot), so its sparklines have whole minutes."""
    failures = []
    points_of = {}
    for name, kind in kinds.items():
        cards = driver.find_elements(By.ID, f"card-{name}")
        if not cards:
            failures.append(f"namespace {name} has no card")
            continue
        card = cards[0]
        if kind == "sequence":
            bars = card.find_elements(By.CSS_SELECTOR, ".space svg.bar")
            if not bars or bars[0].size["width"] < 100 or bars[0].size["height"] < 5:
                failures.append(f"{name}: no bar of id space laid out: {[b.size for b in bars]}")
            sparks = card.find_elements(By.CSS_SELECTOR, "svg.spark")
            if len(sparks) != 2:
                failures.append(f"{name}: {len(sparks)} sparklines, want served and refills")
            for spark in sparks:
                if spark.size["width"] < 100:
                    failures.append(f"{name}: a sparkline is not laid out: {spark.size}")
                parent = spark.find_element(By.XPATH, "..")
                text = parent.text
                lines = spark.find_elements(By.TAG_NAME, "polyline")
                points = lines[0].get_attribute("points").split() if lines else []
                if "no whole minute yet; this minute so far " in text:
                    # A node younger than a minute: nothing drawn yet, the count written.
                    if points:
                        failures.append(f"{name}: a sparkline draws the minute in progress: {points}")
                elif not points or not spark.find_elements(By.TAG_NAME, "circle"):
                    failures.append(f"{name}: a sparkline has no points: {text!r}")
                elif "latest " not in text or "peak " not in text:
                    failures.append(f"{name}: a sparkline's numbers are not written: {text!r}")
                points_of[(name, parent.get_attribute("class"))] = points
        elif kind == "snowflake":
            if "worker pool" not in card.text:
                failures.append(f"{name}: no worker pool: {card.text!r}")
    # photos' 25 ids (all in the node's first minute): the minute in progress on a young node.
    photos = driver.find_element(By.CSS_SELECTOR, "#card-photos .metric.served").text
    if not points_of.get(("photos", "metric served")) and "this minute so far 25" not in photos:
        failures.append(f"photos' 25 ids are not this minute's count: {photos!r}")
    if loaded and len(points_of.get(("orders", "metric served"), [])) < 3:
        failures.append(f"orders, loaded for minutes, has under 3 points: {points_of.get(('orders', 'metric served'))}")
    # legacy_users' bar: as wide as the share of its id space used, in red.
    fraction = fractions["legacy_users"]
    track = driver.find_elements(By.CSS_SELECTOR, "#card-legacy_users svg.bar")
    used = driver.find_elements(By.CSS_SELECTOR, "#card-legacy_users rect.used")
    if not track or not used:
        failures.append("legacy_users has no bar")
    else:
        want = fraction * track[0].size["width"]
        got = used[0].size["width"]
        if fraction <= 0 or abs(got - want) > 1.5:
            failures.append(f"legacy_users' bar is {got} px wide, want {want} ({fraction} used)")
        if "warn" not in used[0].get_attribute("class"):
            failures.append("legacy_users' bar is not red")
    color = driver.execute_script(
        "return getComputedStyle(document.querySelector('#card-legacy_users rect.used')).fill")
    if color != "rgb(192, 48, 43)":
        failures.append(f"legacy_users' bar is drawn in {color}, want the red of the style sheet")
    below = driver.find_elements(By.CSS_SELECTOR, "#below tr")
    if not any(r.text.startswith("tickets_odd 1 10 ") for r in below):
        failures.append(f"the block run.sh asked of tickets_odd is not under nodes below: {[r.text for r in below]}")
    logs = driver.get_log("browser")
    if logs:
        failures.append(f"the browser's console says: {logs}")
    return failures


if __name__ == "__main__":
    sys.exit(main())
