//! A way into the status page for a browser when `[auth]` is on: `GET /login` is a form for a
//! token, `POST /login` checks it (it must read every namespace, as the page does) and keeps it
//! in a cookie, `POST /logout` forgets it. `GET /` takes the cookie where an API client sends
//! `Authorization: Bearer`, and sends a browser without either to the form.
//!
//! Invariants:
//! - The cookie is `HttpOnly` (no script reads it), `SameSite=Strict` (no other site's page
//!   sends it, so no cross-site request carries it) and `Secure` on a TLS connection; it holds
//!   the token percent-encoded and lasts [`COOKIE_MAX_AGE`]. It is honoured by the status page
//!   only: every API route still wants the `Authorization` header, so a cookie can never hand
//!   out an id or move a watermark.
//! - The token is checked by the node's one rule ([`Node::admit_node_read`]), with its
//!   counters; a refused token sets no cookie and sends the browser back to the form, which
//!   says it was refused (never why in detail, never the token).
//! - Every value written into the page is escaped (maud); nothing echoes the token back.

use super::Transport;
use crate::node::requests::Credentials;
use crate::node::Node;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Form};
use maud::{html, Markup, DOCTYPE};
use std::sync::Arc;

/// The cookie's name.
pub const COOKIE: &str = "idmint_token";

/// How long a browser keeps the cookie, in seconds (8 hours: a working day).
pub const COOKIE_MAX_AGE: u64 = 8 * 3600;

/// The sign-in form.
#[derive(Debug, serde::Deserialize, utoipa::ToSchema)]
pub struct LoginForm {
    /// A bearer token that may read every namespace.
    token: String,
}

/// `GET /login`: the form; `?refused` after a refused token.
pub async fn form(uri: axum::http::Uri) -> Response {
    let refused = uri
        .query()
        .is_some_and(|q| q.split('&').any(|p| p == "refused"));
    page(refused)
}

/// `POST /login`: a token that reads every namespace is kept in the cookie and the browser
/// goes to `/`; any other sends it back to `/login?refused`.
pub async fn login(
    State(node): State<Arc<Node>>,
    transport: Option<Extension<Transport>>,
    Form(form): Form<LoginForm>,
) -> Response {
    let token = form.token.trim();
    let header = format!("Bearer {token}");
    if node
        .admit_node_read(Credentials::Header(Some(header.as_bytes())))
        .is_err()
    {
        return see_other("/login?refused", None);
    }
    let secure = transport.is_some_and(|Extension(t)| t.tls);
    let cookie = format!(
        "{COOKIE}={}; Path=/; Max-Age={COOKIE_MAX_AGE}; HttpOnly; SameSite=Strict{}",
        encode(token),
        if secure { "; Secure" } else { "" }
    );
    see_other("/", Some(&cookie))
}

/// `POST /logout`: the cookie is dropped and the browser goes to the form.
pub async fn logout() -> Response {
    let cookie = format!("{COOKIE}=; Path=/; Max-Age=0; HttpOnly; SameSite=Strict");
    see_other("/login", Some(&cookie))
}

/// The bearer credentials of a status page request: its `Authorization` header, else its
/// cookie (as `Bearer <token>`).
pub fn credentials(headers: &HeaderMap) -> Option<Vec<u8>> {
    if let Some(value) = headers.get(header::AUTHORIZATION) {
        return Some(value.as_bytes().to_vec());
    }
    let token = headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .find_map(|pair| pair.trim().strip_prefix(COOKIE)?.strip_prefix('='))
        .and_then(decode)?;
    Some(format!("Bearer {token}").into_bytes())
}

/// Whether a request comes from a browser (it accepts HTML), which gets the form rather than a
/// JSON 401.
pub fn from_browser(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.contains("text/html"))
}

/// 303 to `/login`, for a browser that has no (valid) cookie.
pub fn to_form() -> Response {
    let mut response = StatusCode::SEE_OTHER.into_response();
    response
        .headers_mut()
        .insert(header::LOCATION, HeaderValue::from_static("/login"));
    response
}

fn see_other(location: &'static str, cookie: Option<&str>) -> Response {
    let mut response = StatusCode::SEE_OTHER.into_response();
    let headers = response.headers_mut();
    headers.insert(header::LOCATION, HeaderValue::from_static(location));
    if let Some(value) = cookie.and_then(|c| HeaderValue::from_str(c).ok()) {
        headers.insert(header::SET_COOKIE, value);
    }
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

fn page(refused: bool) -> Response {
    let body: Markup = html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { "idmint: sign in" }
            }
            body style="font-family: system-ui, sans-serif; max-width: 32em; margin: 4em auto" {
                h1 { "idmint status" }
                p { "This node asks for a token. One that may read every namespace (scope "
                    code { "read" } " on " code { "*" } ") opens the status page." }
                @if refused {
                    p id="refused" style="color: #b00020" {
                        "That token was refused: it is not one this node knows, or it cannot read every namespace."
                    }
                }
                form method="post" action="/login" {
                    label for="token" { "Token " }
                    input id="token" name="token" type="password" autocomplete="current-password"
                        required size="40";
                    " "
                    button type="submit" { "Sign in" }
                }
            }
        }
    };
    let mut response = axum::response::Html(body.into_string()).into_response();
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// A token as a cookie value: letters, digits and `-._~` as they are, every other byte `%XX`.
fn encode(token: &str) -> String {
    let mut out = String::with_capacity(token.len());
    for b in token.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The inverse of [`encode`]; `None` for a value that is not one of its outputs.
fn decode(value: &str) -> Option<String> {
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_token_survives_the_cookie() {
        for token in ["idmint_00ff", "with space;and=semicolon", "ünïcode%"] {
            let value = encode(token);
            assert!(value
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-._~%".contains(&b)));
            assert_eq!(decode(&value).as_deref(), Some(token));
        }
        assert_eq!(decode("%G0"), None);
        assert_eq!(decode("%4"), None);
    }

    #[test]
    fn the_header_wins_over_the_cookie() {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::COOKIE,
            HeaderValue::from_static("a=1; idmint_token=idmint_ab"),
        );
        assert_eq!(credentials(&headers).unwrap(), b"Bearer idmint_ab");
        headers.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("Bearer other"),
        );
        assert_eq!(credentials(&headers).unwrap(), b"Bearer other");
        assert!(credentials(&HeaderMap::new()).is_none());
    }
}
