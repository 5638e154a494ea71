//! What a tool's request asks for (a CONNECT tunnel to `host:port`, or a
//! plain-HTTP request in absolute form to forward), and the proxy's own
//! answers: 400, 403 (with the rule), 502 and 503. Pure: no I/O.

use axum::body::Body;
use axum::http::header::{HeaderValue, CONTENT_TYPE};
use axum::http::uri::Scheme;
use axum::http::{Method, Request, Response, StatusCode};

/// The header of a refusal naming the rule that refused
/// (`blocked-range:link-local`, `not-allowed`, `over-limit:per-project`).
pub const RULE_HEADER: &str = "x-corral-egress-rule";

/// The port of an `http://` URL without one.
const HTTP_PORT: u16 = 80;

/// How a request goes out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `CONNECT host:port`: a byte tunnel (HTTPS, or anything else).
    Tunnel,
    /// `GET http://host[:port]/path`: forwarded in origin form.
    Forward,
}

/// The destination of one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wanted {
    pub kind: Kind,
    /// As in the request's authority (an IPv6 address in brackets).
    pub host: String,
    pub port: u16,
    /// `host[:port]` as the request wrote it, without user info: the
    /// `Host` header of a forwarded request.
    pub authority: String,
}

impl Wanted {
    /// `host:port`, as events and 502s name it.
    pub fn target(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }
}

/// What `request` asks for, or why it is not a request a proxy serves
/// (the one-line reason of the 400).
pub fn wanted<B>(request: &Request<B>) -> Result<Wanted, &'static str> {
    let uri = request.uri();
    let kind = if request.method() == Method::CONNECT {
        Kind::Tunnel
    } else {
        match uri.scheme() {
            Some(s) if *s == Scheme::HTTP => Kind::Forward,
            Some(s) if *s == Scheme::HTTPS => {
                return Err("an https:// URL goes through CONNECT host:443 (set HTTPS_PROXY)")
            }
            Some(_) => return Err("only http:// URLs and CONNECT host:port are proxied"),
            None => {
                return Err(
                    "this is a proxy: send an absolute-form request (GET http://host/path) \
                     or CONNECT host:port",
                )
            }
        }
    };
    let authority = uri.authority().ok_or("the request names no host")?;
    let host = authority.host();
    if host.is_empty() {
        return Err("the request names no host");
    }
    let port = match (kind, authority.port_u16()) {
        (_, Some(0)) => return Err("port 0 is not a destination"),
        (_, Some(port)) => port,
        (Kind::Forward, None) => HTTP_PORT,
        (Kind::Tunnel, None) => return Err("CONNECT needs host:port"),
    };
    let authority = match authority.port() {
        Some(port) => format!("{host}:{port}"),
        None => host.to_string(),
    };
    Ok(Wanted {
        kind,
        host: host.to_string(),
        port,
        authority,
    })
}

fn text(status: StatusCode, body: String) -> Response<Body> {
    let mut response = Response::new(Body::from(body));
    *response.status_mut() = status;
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

fn with_rule(mut response: Response<Body>, rule: &str) -> Response<Body> {
    let value = HeaderValue::from_str(rule).unwrap_or(HeaderValue::from_static("refused"));
    response.headers_mut().insert(RULE_HEADER, value);
    response
}

/// 400: not a request the proxy serves.
pub fn bad_request(why: &str) -> Response<Body> {
    text(
        StatusCode::BAD_REQUEST,
        format!("corral egress proxy: {why}\n"),
    )
}

/// 403: refused by `rule`.
pub fn refused(method: &Method, wanted: &Wanted, project: &str, rule: &str) -> Response<Body> {
    let body = format!(
        "corral egress proxy: refused {method} {} for project {project} (rule {rule})\n",
        wanted.target()
    );
    with_rule(text(StatusCode::FORBIDDEN, body), rule)
}

/// 503 written raw on a connection refused before its request was read
/// (over the total limit, or its project's), followed by a close.
pub fn over_limit(rule: &str) -> Vec<u8> {
    let body = format!("corral egress proxy: too many connections (rule {rule})\n");
    format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain; charset=utf-8\r\n\
         {RULE_HEADER}: {rule}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// 502: the upstream could not be reached or failed (`what`: e.g.
/// `connect to 203.0.113.5:80: connection refused`).
pub fn bad_gateway(what: &str) -> Response<Body> {
    text(
        StatusCode::BAD_GATEWAY,
        format!("corral egress proxy: {what}\n"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(method: Method, uri: &str) -> Result<Wanted, &'static str> {
        wanted(&Request::builder().method(method).uri(uri).body(()).unwrap())
    }

    #[test]
    fn connect_and_absolute_http_are_proxied_the_rest_refused() {
        let t = parse(Method::CONNECT, "example.com:443").unwrap();
        assert_eq!(
            (t.kind, t.host.as_str(), t.port),
            (Kind::Tunnel, "example.com", 443)
        );
        let f = parse(Method::GET, "http://u:p@Example.com/x?y").unwrap();
        assert_eq!((f.kind, f.port), (Kind::Forward, 80));
        assert_eq!(f.authority, "Example.com");
        let v6 = parse(Method::POST, "http://[::1]:8080/").unwrap();
        assert_eq!(
            (v6.host.as_str(), v6.authority.as_str()),
            ("[::1]", "[::1]:8080")
        );
        assert_eq!(v6.target(), "[::1]:8080");
        for (method, uri) in [
            (Method::GET, "/x"),
            (Method::GET, "https://example.com/"),
            (Method::GET, "ftp://example.com/"),
            (Method::CONNECT, "example.com"),
            (Method::CONNECT, "example.com:0"),
        ] {
            assert!(parse(method.clone(), uri).is_err(), "{method} {uri}");
        }
    }

    #[test]
    fn the_raw_503_is_one_complete_response() {
        let raw = String::from_utf8(over_limit("over-limit:total")).unwrap();
        let (head, body) = raw.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 503 "));
        assert!(head.contains(&format!("content-length: {}", body.len())));
    }
}
