//! The exporter's HTTP: one request per connection, read with a deadline and a size limit,
//! answered and closed. Only `GET /metrics` (optionally `?scraper=NAME`) and `GET /healthz`
//! are served; every other path is 404, every other method 405.
//!
//! A scraper is who gets a window of its own: the `scraper` query parameter when given (a
//! scrape config's `params`), else the client's IP address and `User-Agent` together. Two
//! Prometheus servers on different hosts are told apart without configuration; two on one host
//! with the same version need `scraper` set.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// The longest request head read.
pub const MAX_HEAD_BYTES: usize = 8192;

/// How long a client may take to send its request.
pub const READ_TIMEOUT: Duration = Duration::from_secs(5);

/// What a request asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    Metrics { scraper: String, accept: String },
    Health,
    NotFound,
    MethodNotAllowed,
    Bad(String),
}

/// A scraper name: 1–64 of `A-Z a-z 0-9 _ . : -`.
fn valid_scraper(s: &str) -> bool {
    (1..=64).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b':' | b'-'))
}

/// Reads a request head's route from `head` (up to the blank line) sent by `peer`.
pub fn route(head: &str, peer: Option<SocketAddr>) -> Route {
    let mut lines = head.split("\r\n");
    let request = lines.next().unwrap_or("");
    let mut parts = request.split(' ');
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let (mut agent, mut accept) = ("", "");
    for l in lines {
        if let Some((k, v)) = l.split_once(':') {
            if k.eq_ignore_ascii_case("user-agent") {
                agent = v.trim();
            } else if k.eq_ignore_ascii_case("accept") {
                accept = v.trim();
            }
        }
    }
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    if path != "/metrics" && path != "/healthz" {
        return Route::NotFound;
    }
    if method != "GET" {
        return Route::MethodNotAllowed;
    }
    if path == "/healthz" {
        return Route::Health;
    }
    let mut scraper = None;
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        if let Some(v) = pair.strip_prefix("scraper=") {
            if !valid_scraper(v) {
                return Route::Bad(format!(
                    "scraper={v:?}: a scraper name is 1 to 64 of A-Z a-z 0-9 _ . : -"
                ));
            }
            scraper = Some(v.to_string());
        }
    }
    let scraper = scraper.unwrap_or_else(|| {
        let ip = peer.map_or_else(|| "unknown".to_string(), |p| p.ip().to_string());
        let agent: String = agent.chars().take(96).collect();
        format!("{ip} {agent}")
    });
    Route::Metrics {
        scraper,
        accept: accept.to_string(),
    }
}

/// Reads the request head from `stream` (up to the blank line, at most `MAX_HEAD_BYTES`).
pub fn read_head(stream: &mut TcpStream) -> std::io::Result<String> {
    stream.set_read_timeout(Some(READ_TIMEOUT))?;
    let mut buf = Vec::with_capacity(512);
    let mut chunk = [0u8; 1024];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
        if buf.len() >= MAX_HEAD_BYTES {
            return Err(std::io::Error::other("request head too long"));
        }
        let n = stream.read(&mut chunk)?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    Ok(String::from_utf8_lossy(&buf).into_owned())
}

/// Writes one response and closes.
pub fn respond(stream: &mut TcpStream, status: &str, content_type: &str, body: &str) {
    let _ = stream.set_write_timeout(Some(READ_TIMEOUT));
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let _ = stream.write_all(head.as_bytes());
    let _ = stream.write_all(body.as_bytes());
    let _ = stream.flush();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_and_scrapers() {
        let peer: SocketAddr = "10.0.0.7:5555".parse().unwrap();
        let r = route(
            "GET /metrics HTTP/1.1\r\nUser-Agent: Prometheus/2.42.0\r\nAccept: application/openmetrics-text\r\n\r\n",
            Some(peer),
        );
        assert_eq!(
            r,
            Route::Metrics {
                scraper: "10.0.0.7 Prometheus/2.42.0".into(),
                accept: "application/openmetrics-text".into()
            }
        );
        let r = route(
            "GET /metrics?x=1&scraper=prom-a HTTP/1.1\r\n\r\n",
            Some(peer),
        );
        assert!(matches!(r, Route::Metrics { scraper, .. } if scraper == "prom-a"));
        assert_eq!(route("GET /healthz HTTP/1.1\r\n\r\n", None), Route::Health);
        assert_eq!(route("GET / HTTP/1.1\r\n\r\n", None), Route::NotFound);
        assert_eq!(
            route("GET /metrics/x HTTP/1.1\r\n\r\n", None),
            Route::NotFound
        );
        assert_eq!(
            route("POST /metrics HTTP/1.1\r\n\r\n", None),
            Route::MethodNotAllowed
        );
        match route("GET /metrics?scraper=a%20b HTTP/1.1\r\n\r\n", None) {
            Route::Bad(why) => assert!(why.contains("a%20b"), "{why}"),
            other => panic!("{other:?}"),
        }
    }
}
