//! Helpers used by the Brisa runtime's router: method normalisation, path-template
//! parsing, duration literals (`500ms`, `30s`, `5m`, `2h`) and a small route table.

use std::collections::HashMap;
use std::time::Duration;

const METHODS: [&str; 6] = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD"];

/// One piece of a path template such as `/books/{id}/pages/{*rest}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Segment {
    Literal(String),
    Capture(String),
    CatchAll(String),
}

/// Upper-cases a method name and rejects anything `registerEndpoint` does not accept.
pub fn normalize_method(method: &str) -> Option<&'static str> {
    let upper = method.trim().to_ascii_uppercase();
    METHODS.iter().copied().find(|m| *m == upper)
}

/// Splits a template into segments. A catch-all is only valid as the last segment.
pub fn split_path_template(template: &str) -> Result<Vec<Segment>, String> {
    let parts: Vec<&str> = template.trim_matches('/').split('/').filter(|p| !p.is_empty()).collect();
    let mut out = Vec::with_capacity(parts.len());
    for (i, part) in parts.iter().enumerate() {
        let seg = match part.strip_prefix('{').and_then(|p| p.strip_suffix('}')) {
            Some(name) if name.starts_with('*') => {
                if i + 1 != parts.len() {
                    return Err(format!("catch-all `{part}` must be the last segment"));
                }
                Segment::CatchAll(name[1..].to_string())
            }
            Some(name) if name.is_empty() => return Err("empty capture `{}`".to_string()),
            Some(name) => Segment::Capture(name.to_string()),
            None => Segment::Literal(part.to_string()),
        };
        out.push(seg);
    }
    Ok(out)
}

/// Parses a Brisa duration literal. Returns `None` for unknown units or bad numbers.
pub fn parse_duration_literal(text: &str) -> Option<Duration> {
    let text = text.trim();
    let split = text.find(|c: char| !c.is_ascii_digit())?;
    let (num, unit) = text.split_at(split);
    let n: u64 = num.parse().ok()?;
    match unit {
        "ms" => Some(Duration::from_millis(n)),
        "s" => Some(Duration::from_secs(n)),
        "m" => Some(Duration::from_secs(n * 60)),
        "h" => Some(Duration::from_secs(n * 3600)),
        _ => None,
    }
}

/// Routes registered for one method, matched in registration order.
#[derive(Debug, Default)]
pub struct RouteTable {
    routes: HashMap<&'static str, Vec<(Vec<Segment>, String)>>,
}

impl RouteTable {
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers `handler` (a function name) for `method` + `template`.
    /// Fails on an unknown method, a malformed template or a duplicate registration.
    pub fn insert(&mut self, method: &str, template: &str, handler: &str) -> Result<(), String> {
        let method = normalize_method(method).ok_or_else(|| format!("unsupported method {method}"))?;
        let segments = split_path_template(template)?;
        let list = self.routes.entry(method).or_default();
        if list.iter().any(|(s, _)| *s == segments) {
            return Err(format!("{method} {template} registered twice"));
        }
        list.push((segments, handler.to_string()));
        Ok(())
    }

    /// Finds the handler for a concrete request path and returns the captured values.
    pub fn lookup(&self, method: &str, path: &str) -> Option<(&str, HashMap<String, String>)> {
        let method = normalize_method(method)?;
        let parts: Vec<&str> = path.trim_matches('/').split('/').filter(|p| !p.is_empty()).collect();
        'routes: for (segments, handler) in self.routes.get(method)? {
            let mut captures = HashMap::new();
            for (i, seg) in segments.iter().enumerate() {
                match seg {
                    Segment::CatchAll(name) => {
                        captures.insert(name.clone(), parts.get(i..).unwrap_or(&[]).join("/"));
                        return Some((handler.as_str(), captures));
                    }
                    Segment::Literal(lit) if parts.get(i) == Some(&lit.as_str()) => {}
                    Segment::Capture(name) if i < parts.len() => {
                        captures.insert(name.clone(), parts[i].to_string());
                    }
                    _ => continue 'routes,
                }
            }
            if segments.len() == parts.len() {
                return Some((handler.as_str(), captures));
            }
        }
        None
    }

    pub fn len(&self) -> usize {
        self.routes.values().map(Vec::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn captures_path_segments() {
        let mut t = RouteTable::new();
        t.insert("get", "/books/{id}", "get_book").unwrap();
        let (h, caps) = t.lookup("GET", "/books/42").unwrap();
        assert_eq!(h, "get_book");
        assert_eq!(caps["id"], "42");
        assert!(t.insert("GET", "/books/{id}", "other").is_err());
    }

    #[test]
    fn duration_literals() {
        assert_eq!(parse_duration_literal("500ms"), Some(Duration::from_millis(500)));
        assert_eq!(parse_duration_literal("5m"), Some(Duration::from_secs(300)));
        assert_eq!(parse_duration_literal("3d"), None);
    }
}
