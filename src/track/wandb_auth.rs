//! Where W&B is and who we are: the API base URL (`WANDB_BASE_URL`, default
//! `https://api.wandb.ai`) and the API key (`WANDB_API_KEY`, else the `~/.netrc` entry of the API
//! host that `wandb login` writes), as the Python client resolves them; plus the HTTP Basic
//! header (`api:<key>`) the API expects.
use std::path::PathBuf;

/// W&B's hosted API.
pub const DEFAULT_BASE_URL: &str = "https://api.wandb.ai";

/// `WANDB_BASE_URL` normalised (no trailing slash, `https://` when no scheme is given).
pub fn base_url(env_value: Option<String>) -> String {
    let raw = env_value
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| DEFAULT_BASE_URL.to_string());
    let trimmed = raw.trim_end_matches('/');
    if trimmed.starts_with("http://") || trimmed.starts_with("https://") {
        trimmed.to_string()
    } else {
        format!("https://{trimmed}")
    }
}

/// The host of `url` without scheme, port or path (the `machine` of a netrc entry).
pub fn host(url: &str) -> &str {
    let rest = url.split_once("://").map(|(_, r)| r).unwrap_or(url);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or(rest);
    let authority = authority.rsplit('@').next().unwrap_or(authority);
    if let Some(v6) = authority.strip_prefix('[') {
        return v6.split(']').next().unwrap_or(v6);
    }
    authority.split(':').next().unwrap_or(authority)
}

/// The API key: `WANDB_API_KEY`, else the netrc password for `host` (or the `default` entry).
pub fn api_key(env_key: Option<String>, netrc: Option<String>, host: &str) -> Option<String> {
    if let Some(k) = env_key
        .map(|k| k.trim().to_string())
        .filter(|k| !k.is_empty())
    {
        return Some(k);
    }
    netrc.and_then(|text| netrc_password(&text, host))
}

/// The netrc file: `$NETRC`, else `~/.netrc`.
pub fn netrc_path() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("NETRC").filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(p));
    }
    std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(|h| PathBuf::from(h).join(".netrc"))
}

/// The `password` of the `machine host` entry (or of `default` when no machine matches).
pub fn netrc_password(text: &str, host: &str) -> Option<String> {
    // Which entry the tokens belong to: a matching machine, another machine, or `default`.
    #[derive(PartialEq)]
    enum Entry {
        None,
        Match,
        Other,
        Default,
    }
    let mut tokens = text.split_whitespace();
    let mut entry = Entry::None;
    let (mut found, mut fallback) = (None, None);
    while let Some(t) = tokens.next() {
        match t {
            "machine" => {
                entry = if tokens.next() == Some(host) {
                    Entry::Match
                } else {
                    Entry::Other
                }
            }
            "default" => entry = Entry::Default,
            "login" | "account" => {
                tokens.next();
            }
            "password" => {
                let pw = tokens.next().map(str::to_string);
                match entry {
                    Entry::Match if found.is_none() => found = pw,
                    Entry::Default if fallback.is_none() => fallback = pw,
                    _ => {}
                }
            }
            _ => {}
        }
    }
    found.or(fallback)
}

/// `Authorization: Basic base64("api:<key>")`.
pub fn basic_auth(key: &str) -> String {
    format!("Basic {}", base64(format!("api:{key}").as_bytes()))
}

/// Standard base64 with padding (RFC 4648).
pub fn base64(data: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = ((b[0] as u32) << 16) | ((b[1] as u32) << 8) | b[2] as u32;
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_url_is_normalised() {
        assert_eq!(base_url(None), "https://api.wandb.ai");
        assert_eq!(
            base_url(Some("wandb.example.com/".into())),
            "https://wandb.example.com"
        );
        assert_eq!(
            base_url(Some("http://127.0.0.1:8080".into())),
            "http://127.0.0.1:8080"
        );
        assert_eq!(host("http://127.0.0.1:8080/graphql"), "127.0.0.1");
        assert_eq!(host("https://api.wandb.ai"), "api.wandb.ai");
    }

    #[test]
    fn key_from_env_then_netrc_machine_then_default() {
        let netrc = "machine other.host login user password nope\n\
                     machine api.wandb.ai\n  login user\n  password KEY1\n\
                     default login anon password DEF\n";
        assert_eq!(
            api_key(Some("ENV".into()), Some(netrc.into()), "api.wandb.ai").as_deref(),
            Some("ENV")
        );
        assert_eq!(
            api_key(None, Some(netrc.into()), "api.wandb.ai").as_deref(),
            Some("KEY1")
        );
        assert_eq!(
            api_key(Some(" ".into()), Some(netrc.into()), "x.y").as_deref(),
            Some("DEF")
        );
        assert_eq!(
            api_key(None, Some("machine a password b".into()), "x.y"),
            None
        );
        assert_eq!(api_key(None, None, "x.y"), None);
    }

    #[test]
    fn base64_matches_rfc4648() {
        for (raw, enc) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64(raw.as_bytes()), enc);
        }
        assert_eq!(basic_auth("k"), "Basic YXBpOms=");
    }
}
