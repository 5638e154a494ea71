//! The streamable HTTP transport of a server: rmcp's client over reqwest
//! with rustls (the ring provider, installed once), the config's headers on
//! every request, no redirects to other origins (rmcp's policy).

use std::collections::{BTreeMap, HashMap};
use std::sync::Once;

use reqwest::header::{HeaderName, HeaderValue};
use rmcp::service::{RunningService, ServiceExt};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::{ClientHandler, RoleClient};

/// Connects `handler` to the server at `url` (initialize included),
/// sending `headers` with every request.
pub async fn connect<H: ClientHandler>(
    handler: H,
    url: &str,
    headers: &BTreeMap<String, String>,
) -> Result<RunningService<RoleClient, H>, String> {
    let config = transport_config(url, headers)?;
    handler
        .serve(StreamableHttpClientTransport::from_config(config))
        .await
        .map_err(|e| format!("initialize failed: {e}"))
}

/// The transport's config for `url` with `headers`; installs the TLS
/// provider first.
pub fn transport_config(
    url: &str,
    headers: &BTreeMap<String, String>,
) -> Result<StreamableHttpClientTransportConfig, String> {
    static PROVIDER: Once = Once::new();
    PROVIDER.call_once(|| {
        // Fails only when a provider is installed already, which is fine.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
    let mut custom = HashMap::new();
    for (name, value) in headers {
        let name = HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| format!("header name {name:?} is not valid"))?;
        let value = HeaderValue::from_str(value)
            .map_err(|_| format!("the value of header {name} is not valid"))?;
        custom.insert(name, value);
    }
    Ok(StreamableHttpClientTransportConfig::with_uri(url.to_string()).custom_headers(custom))
}
