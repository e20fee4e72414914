"""Signs in to the status page of a live node with `[auth]` in headless Chromium, as a person
would: `/` sends the browser to the form, a refused token says so and sets no cookie, the
`read` token opens the page and is kept in an HttpOnly, SameSite=Strict cookie, and signing out
drops it.

    python3 check_login.py http://127.0.0.1:PORT READ_TOKEN
"""

import sys
import tempfile

from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.ui import WebDriverWait

from check import chromium


def sign_in(driver, base, token):
    driver.get(base + "/login")
    field = driver.find_element(By.ID, "token")
    field.send_keys(token)
    field.submit()
    # The answer is a new page: wait until the form's page is gone before reading it.
    WebDriverWait(driver, 10).until(expected_conditions.staleness_of(field))


def main() -> int:
    base, token = sys.argv[1], sys.argv[2]
    failures = []
    with tempfile.TemporaryDirectory() as profile:
        driver = chromium(profile)
        try:
            driver.get(base + "/")
            if not driver.current_url.endswith("/login"):
                failures.append(f"/ without a token went to {driver.current_url}, not /login")
            sign_in(driver, base, "idmint_not_a_token")
            if not driver.find_elements(By.ID, "refused"):
                failures.append("a refused token is not said so")
            if driver.get_cookies():
                failures.append(f"a refused token set a cookie: {driver.get_cookies()}")
            sign_in(driver, base, token)
            if driver.current_url.rstrip("/") != base or driver.title != "idmint status":
                failures.append(f"after signing in: {driver.current_url} {driver.title!r}")
            cookies = {c["name"]: c for c in driver.get_cookies()}
            cookie = cookies.get("idmint_token")
            if not cookie:
                failures.append(f"no idmint_token cookie: {cookies}")
            elif not cookie.get("httpOnly") or cookie.get("sameSite") != "Strict":
                failures.append(f"the cookie is not HttpOnly and SameSite=Strict: {cookie}")
            driver.get(base + "/ui")
            if driver.title != "idmint status":
                failures.append("the cookie does not open /ui")
            # Signing out: the form's POST, as a page would send it.
            driver.execute_script(
                "const f = document.createElement('form'); f.method = 'post';"
                "f.action = '/logout'; document.body.appendChild(f); f.submit();"
            )
            driver.get(base + "/")
            if not driver.current_url.endswith("/login"):
                failures.append(f"after signing out / went to {driver.current_url}")
        finally:
            driver.quit()
    for f in failures:
        print("FAIL:", f, file=sys.stderr)
    print(f"status page sign-in: {0 if failures else 1} passed, {1 if failures else 0} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
