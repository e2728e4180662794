//! Key paths (`trainer.num_generations`, `agents[1].model`) and the index from key path to the
//! line/column where that key is written, built from the YAML event stream, so that errors found
//! after deserializing still point into the file.
use crate::error::Location;
use std::collections::HashMap;
use std::fmt;
use yaml_rust2::parser::{Event, MarkedEventReceiver, Parser};
use yaml_rust2::scanner::Marker;

/// One step of a key path: a mapping key or a list index.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Seg {
    /// A mapping key.
    Key(String),
    /// A 0-based list index.
    Index(usize),
}

/// A path from the document root to a value.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct KeyPath(pub Vec<Seg>);

impl KeyPath {
    /// The document root (empty path).
    pub fn root() -> Self {
        KeyPath(Vec::new())
    }

    /// This path extended by mapping key `k`.
    pub fn key(&self, k: &str) -> Self {
        let mut v = self.0.clone();
        v.push(Seg::Key(k.to_string()));
        KeyPath(v)
    }

    /// This path extended by list index `i`.
    pub fn index(&self, i: usize) -> Self {
        let mut v = self.0.clone();
        v.push(Seg::Index(i));
        KeyPath(v)
    }

    /// This path extended by `rest`.
    pub fn join(&self, rest: &[Seg]) -> Self {
        let mut v = self.0.clone();
        v.extend(rest.iter().cloned());
        KeyPath(v)
    }

    /// The path one step up; `None` at the root.
    pub fn parent(&self) -> Option<Self> {
        if self.0.is_empty() {
            None
        } else {
            Some(KeyPath(self.0[..self.0.len() - 1].to_vec()))
        }
    }

    /// The last segment if it is a mapping key.
    pub fn last_key(&self) -> Option<&str> {
        match self.0.last() {
            Some(Seg::Key(k)) => Some(k),
            _ => None,
        }
    }

    /// The nearest enclosing mapping key name, skipping list indices (`agents[1]` -> `agents`).
    pub fn section_name(&self) -> &str {
        self.0
            .iter()
            .rev()
            .find_map(|s| match s {
                Seg::Key(k) => Some(k.as_str()),
                Seg::Index(_) => None,
            })
            .unwrap_or("")
    }

    /// Whether `prefix` is a (not necessarily proper) prefix of this path.
    pub fn starts_with(&self, prefix: &KeyPath) -> bool {
        self.0.len() >= prefix.0.len() && self.0[..prefix.0.len()] == prefix.0[..]
    }

    /// Parses `a.b.c`, `agents[1].model` or `agents.1.model` (numbers become list indices).
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut segs = Vec::new();
        for part in text.split('.') {
            let (name, mut rest) = match part.find('[') {
                Some(i) => (&part[..i], &part[i..]),
                None => (part, ""),
            };
            if name.is_empty() && rest.is_empty() {
                return Err(format!("empty key in `{text}`"));
            }
            if !name.is_empty() {
                match name.parse::<usize>() {
                    Ok(i) => segs.push(Seg::Index(i)),
                    Err(_) => segs.push(Seg::Key(name.to_string())),
                }
            }
            while !rest.is_empty() {
                let close = rest
                    .find(']')
                    .ok_or_else(|| format!("unclosed `[` in `{text}`"))?;
                let idx = rest[1..close].parse::<usize>().map_err(|_| {
                    format!("`{}` is not a list index in `{text}`", &rest[1..close])
                })?;
                segs.push(Seg::Index(idx));
                rest = &rest[close + 1..];
                if !rest.is_empty() && !rest.starts_with('[') {
                    return Err(format!("expected `.` or `[` after `]` in `{text}`"));
                }
            }
        }
        Ok(KeyPath(segs))
    }
}

impl fmt::Display for KeyPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return f.write_str("(top level)");
        }
        for (i, s) in self.0.iter().enumerate() {
            match s {
                Seg::Key(k) if i == 0 => f.write_str(k)?,
                Seg::Key(k) => write!(f, ".{k}")?,
                Seg::Index(n) => write!(f, "[{n}]")?,
            }
        }
        Ok(())
    }
}

/// The deepest nesting of mappings and lists a scenario may have. Real scenarios nest 4 or 5
/// levels. Indexing a document costs time and memory quadratic in its depth (each value's key
/// path holds all its parents), so a deeper one is refused as soon as the parser reaches the
/// 129th level, before it is read further; 128 is also the YAML deserializer's own recursion
/// limit.
pub const MAX_NESTING: usize = 128;

/// Key path -> where it is written (or the override that set it).
#[derive(Debug, Clone, Default)]
pub struct PositionIndex {
    map: HashMap<KeyPath, Location>,
    /// Keys written twice in one mapping: the path and where the second one is.
    duplicates: Vec<(KeyPath, Location)>,
    /// Where the document first nests deeper than [`MAX_NESTING`] levels.
    too_deep: Option<Location>,
}

impl PositionIndex {
    /// Indexes every mapping key and list item of `text` (its first document). A text the event
    /// parser rejects yields the positions seen before the error (the YAML deserializer reports
    /// the syntax error); so does one nested deeper than [`MAX_NESTING`] (see
    /// [`PositionIndex::too_deep`]).
    pub fn build(text: &str) -> Self {
        let mut rx = Builder::default();
        let mut parser = Parser::new_from_str(text);
        let mut depth = 0usize;
        let mut too_deep = None;
        // Event by event rather than `Parser::load`, which recurses once per level: the depth is
        // checked before the next level is read.
        // Errors are reported by serde_norway with their own location; keep what we have. But
        // the scanner counts flow levels (`[`, `{`) in a byte and stops at 255 ("recursion
        // limit exceeded"), possibly before the 129th level is parsed: that is depth too.
        loop {
            let (ev, mark) = match parser.next_token() {
                Ok(next) => next,
                Err(e) => {
                    if e.info().contains("recursion limit") {
                        too_deep = Some(loc(*e.marker()));
                    }
                    break;
                }
            };
            match ev {
                Event::MappingStart(..) | Event::SequenceStart(..) => {
                    depth += 1;
                    if depth > MAX_NESTING {
                        too_deep = Some(loc(mark));
                        break;
                    }
                }
                Event::MappingEnd | Event::SequenceEnd => depth = depth.saturating_sub(1),
                Event::DocumentEnd | Event::StreamEnd => break,
                _ => {}
            }
            rx.on_event(ev, mark);
        }
        PositionIndex {
            map: rx.map,
            duplicates: rx.duplicates,
            too_deep,
        }
    }

    /// Where the document first nests deeper than [`MAX_NESTING`] levels, if it does.
    pub fn too_deep(&self) -> Option<&Location> {
        self.too_deep.as_ref()
    }

    /// The first key written twice in one mapping, and where its second occurrence is.
    pub fn first_duplicate(&self) -> Option<&(KeyPath, Location)> {
        self.duplicates.first()
    }

    /// Where `path` is written: the exact key, else its nearest indexed ancestor, else 1:1.
    pub fn lookup(&self, path: &KeyPath) -> Location {
        let mut p = Some(path.clone());
        while let Some(cur) = p {
            if let Some(loc) = self.map.get(&cur) {
                return loc.clone();
            }
            p = cur.parent();
        }
        Location::File { line: 1, column: 1 }
    }

    /// Records that `path` (and everything under it) now comes from a `--set` argument, and
    /// so do the mappings the override created on the way (`--set a.b.c=1` makes `a`).
    pub fn set_override(&mut self, path: &KeyPath, arg: &str) {
        self.map.retain(|k, _| !k.starts_with(path));
        let mut cur = path.parent();
        while let Some(p) = cur {
            if p.0.is_empty() || self.map.contains_key(&p) {
                break;
            }
            self.map
                .insert(p.clone(), Location::Override(arg.to_string()));
            cur = p.parent();
        }
        self.map
            .insert(path.clone(), Location::Override(arg.to_string()));
    }
}

enum Frame {
    Map {
        path: KeyPath,
        key: Option<String>,
        /// A list item that is a mapping takes the position of its first key.
        locate_first_key: bool,
    },
    Seq {
        path: KeyPath,
        next: usize,
    },
    /// Inside a complex (non-scalar) mapping key: nothing here is addressable.
    Skip,
}

#[derive(Default)]
struct Builder {
    stack: Vec<Frame>,
    map: HashMap<KeyPath, Location>,
    duplicates: Vec<(KeyPath, Location)>,
}

fn loc(m: Marker) -> Location {
    // yaml-rust2 markers: 1-based lines, 0-based columns.
    Location::File {
        line: m.line(),
        column: m.col() + 1,
    }
}

impl Builder {
    /// Handles the start of a node (scalar, alias, mapping or list); returns its path if it is a
    /// value (not a key) and addressable.
    fn node(&mut self, scalar_key: Option<&str>, mark: Marker) -> Option<KeyPath> {
        match self.stack.last_mut() {
            None => Some(KeyPath::root()),
            Some(Frame::Skip) => None,
            Some(Frame::Seq { path, next }) => {
                let p = path.index(*next);
                *next += 1;
                self.map.insert(p.clone(), loc(mark));
                Some(p)
            }
            Some(Frame::Map {
                path,
                key,
                locate_first_key,
            }) => match key.take() {
                Some(k) => Some(path.key(&k)),
                None => {
                    let k = scalar_key.unwrap_or("<complex key>").to_string();
                    if *locate_first_key {
                        *locate_first_key = false;
                        self.map.insert(path.clone(), loc(mark));
                    }
                    let key_path = path.key(&k);
                    if self.map.contains_key(&key_path) && k != "<alias>" && scalar_key.is_some() {
                        self.duplicates.push((key_path.clone(), loc(mark)));
                    }
                    self.map.insert(key_path, loc(mark));
                    *key = Some(k);
                    None
                }
            },
        }
    }

    fn in_key_position(&self) -> bool {
        matches!(self.stack.last(), Some(Frame::Map { key: None, .. }))
    }
}

impl MarkedEventReceiver for Builder {
    fn on_event(&mut self, ev: Event, mark: Marker) {
        match ev {
            Event::Scalar(text, ..) => {
                self.node(Some(&text), mark);
            }
            Event::Alias(_) => {
                self.node(Some("<alias>"), mark);
            }
            Event::MappingStart(..) | Event::SequenceStart(..) => {
                let is_map = matches!(ev, Event::MappingStart(..));
                if self.in_key_position() || matches!(self.stack.last(), Some(Frame::Skip)) {
                    // A complex key: mark the key as taken, skip its contents.
                    if let Some(Frame::Map { key, .. }) = self.stack.last_mut() {
                        *key = Some("<complex key>".into());
                    }
                    self.stack.push(Frame::Skip);
                    return;
                }
                let from_seq = matches!(self.stack.last(), Some(Frame::Seq { .. }));
                let Some(path) = self.node(None, mark) else {
                    self.stack.push(Frame::Skip);
                    return;
                };
                self.stack.push(if is_map {
                    Frame::Map {
                        path,
                        key: None,
                        locate_first_key: from_seq,
                    }
                } else {
                    Frame::Seq { path, next: 0 }
                });
            }
            Event::MappingEnd | Event::SequenceEnd => {
                self.stack.pop();
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(idx: &PositionIndex, p: &str) -> (usize, usize) {
        match idx.lookup(&KeyPath::parse(p).expect("path")) {
            Location::File { line, column } => (line, column),
            Location::Override(_) => (0, 0),
        }
    }

    #[test]
    fn indexes_keys_and_items() {
        let text = "a:\n  bb: 1\n  c: [x, y]\nlist:\n  - k: 1\n    m: 2\n  - plain\n";
        let idx = PositionIndex::build(text);
        assert_eq!(at(&idx, "a"), (1, 1));
        assert_eq!(at(&idx, "a.bb"), (2, 3));
        assert_eq!(at(&idx, "a.c[1]"), (3, 10));
        assert_eq!(at(&idx, "list[0]"), (5, 5));
        assert_eq!(at(&idx, "list[0].m"), (6, 5));
        assert_eq!(at(&idx, "list[1]"), (7, 5));
        assert_eq!(at(&idx, "a.nope"), (1, 1));
    }

    #[test]
    fn finds_the_second_of_a_duplicate_key() {
        let idx = PositionIndex::build("a:\n  x: 1\n  y: 2\n  x: 3\nb: 1\n");
        let (path, at) = idx.first_duplicate().expect("a duplicate");
        assert_eq!(path.to_string(), "a.x");
        assert_eq!(at, &Location::File { line: 4, column: 3 });
    }

    #[test]
    fn override_creates_its_parents() {
        let mut idx = PositionIndex::build("a:\n  b: 1\n");
        idx.set_override(&KeyPath::parse("x.y.z").expect("path"), "x.y.z=1");
        let want = Location::Override("x.y.z=1".into());
        assert_eq!(idx.lookup(&KeyPath::parse("x").expect("path")), want);
        assert_eq!(idx.lookup(&KeyPath::parse("x.y").expect("path")), want);
        assert_eq!(at(&idx, "a.b"), (2, 3));
    }

    #[test]
    fn refuses_deep_nesting_early() {
        let nested = |n: usize| format!("{}1{}", "[".repeat(n), "]".repeat(n));
        assert!(PositionIndex::build(&nested(MAX_NESTING))
            .too_deep()
            .is_none());
        let deep = PositionIndex::build(&format!("a:\n  b: {}", nested(MAX_NESTING + 1)));
        assert_eq!(
            deep.too_deep(),
            Some(&Location::File {
                line: 2,
                // The two mappings, then the lists from column 6.
                column: 6 + MAX_NESTING - 2
            })
        );
        let block: String = (0..200).map(|i| format!("{}k:\n", " ".repeat(i))).collect();
        assert!(PositionIndex::build(&block).too_deep().is_some());
    }

    #[test]
    fn parses_paths() {
        let p = KeyPath::parse("agents[1].model").expect("path");
        assert_eq!(p, KeyPath::parse("agents.1.model").expect("path"));
        assert_eq!(p.to_string(), "agents[1].model");
        assert!(KeyPath::parse("a..b").is_err());
        assert!(KeyPath::parse("a[x]").is_err());
    }
}
