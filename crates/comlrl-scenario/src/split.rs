//! Hugging Face split specs: `train`, `train[:1100]`, `test[33:133]`, `train[-10:]`,
//! `train[10%:20%]`, resolved to a row range as `datasets.load_dataset(split=...)` does
//! (percent boundaries rounded to the closest row, ties to even; out-of-range bounds are errors).
use std::ops::Range;

/// A parsed split spec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SplitSpec {
    /// The split name (`train`).
    pub name: String,
    /// `None`: the whole split.
    pub slice: Option<Slice>,
}

/// `[from:to]`, both optional, in rows or in percent of the split.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slice {
    /// First row (or percent), negative from the end; `None` = the start.
    pub from: Option<i64>,
    /// End row (or percent), exclusive, negative from the end; `None` = the end.
    pub to: Option<i64>,
    /// The bounds are percentages of the split.
    pub percent: bool,
}

impl SplitSpec {
    /// Parses `name` or `name[from:to]`.
    pub fn parse(spec: &str) -> Result<Self, String> {
        let spec = spec.trim();
        let bad = |why: &str| {
            format!("bad split `{spec}`: {why}; write e.g. `train`, `train[:1100]`, `test[33:133]` or `train[10%:20%]`")
        };
        let (name, slice) = match spec.split_once('[') {
            None => (spec, None),
            Some((name, rest)) => {
                let inner = rest
                    .strip_suffix(']')
                    .ok_or_else(|| bad("missing the closing `]`"))?;
                (name, Some(parse_slice(inner).map_err(|w| bad(&w))?))
            }
        };
        let valid = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.');
        if name.is_empty() || !name.chars().all(valid) {
            return Err(bad(
                "the split name must be letters, digits, `_`, `-` or `.`",
            ));
        }
        Ok(SplitSpec {
            name: name.to_string(),
            slice,
        })
    }

    /// The rows of a split of `n` rows this spec selects. The bounds are numbers a user wrote
    /// (any `i64`), so the arithmetic is done in `i128`, where none of it can overflow.
    pub fn range(&self, n: usize) -> Result<Range<usize>, String> {
        let Some(s) = self.slice else {
            return Ok(0..n);
        };
        let n_i = n as i128;
        let abs = |b: i64| -> i128 {
            if s.percent {
                // Python's round(): half to even, as `datasets` rounds percent slices. `|b| ≤ 100`
                // (checked when parsed), and a float-to-int `as` saturates in any case.
                (b as f64 * n as f64 / 100.0).round_ties_even() as i128
            } else {
                i128::from(b)
            }
        };
        let from = s.from.map_or(0, abs);
        let to = s.to.map_or(n_i, abs);
        if from.abs() > n_i || to.abs() > n_i {
            return Err(format!(
                "the slice [{from}:{to}] of split `{}` is out of range: the split has {n} rows",
                self.name
            ));
        }
        // In -n..=n, so the wrapped bound is in 0..=n: it fits a usize.
        let wrap = |b: i128| {
            if b < 0 {
                n - b.unsigned_abs() as usize
            } else {
                b as usize
            }
        };
        let (from, to) = (wrap(from), wrap(to));
        Ok(from..to.max(from))
    }
}

fn parse_slice(inner: &str) -> Result<Slice, String> {
    let Some((a, b)) = inner.split_once(':') else {
        return Err("a slice needs a `:` (`[from:to]`)".into());
    };
    let bound = |t: &str| -> Result<(Option<i64>, bool), String> {
        let t = t.trim();
        if t.is_empty() {
            return Ok((None, false));
        }
        let (num, pct) = match t.strip_suffix('%') {
            Some(n) => (n.trim(), true),
            None => (t, false),
        };
        let v: i64 = num
            .parse()
            .map_err(|_| format!("`{t}` is not a whole number of rows or a percentage"))?;
        if pct && v.unsigned_abs() > 100 {
            return Err(format!("`{t}` is more than 100%"));
        }
        Ok((Some(v), pct))
    };
    let (from, fp) = bound(a)?;
    let (to, tp) = bound(b)?;
    if from.is_some() && to.is_some() && fp != tp {
        return Err("both bounds must be rows or both percentages".into());
    }
    Ok(Slice {
        from,
        to,
        percent: fp || tp,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(spec: &str, n: usize) -> Result<Range<usize>, String> {
        SplitSpec::parse(spec)?.range(n)
    }

    #[test]
    fn slices_like_datasets() {
        assert_eq!(r("train", 7).unwrap(), 0..7);
        assert_eq!(r("train[:1100]", 2000).unwrap(), 0..1100);
        assert_eq!(r("test[33:133]", 200).unwrap(), 33..133);
        assert_eq!(r("train[-10:]", 100).unwrap(), 90..100);
        assert_eq!(r("train[:-10]", 100).unwrap(), 0..90);
        assert_eq!(r("train[10%:20%]", 1000).unwrap(), 100..200);
        // 12.5 → 12 and 37.5 → 38: Python rounds half to even.
        assert_eq!(r("train[10%:30%]", 125).unwrap(), 12..38);
        assert_eq!(r("train[:50%]", 5).unwrap(), 0..2);
        assert_eq!(r("train[5:2]", 10).unwrap(), 5..5);
    }

    #[test]
    fn extreme_bounds_are_errors_not_panics() {
        for spec in [
            "train[-9223372036854775808:]",
            "train[:-9223372036854775808]",
            "train[9223372036854775807:]",
            "train[-9223372036854775808%:]",
            "train[-9223372036854775808:9223372036854775807]",
        ] {
            match SplitSpec::parse(spec) {
                Ok(s) => {
                    let e = s.range(10).unwrap_err();
                    assert!(e.contains("out of range"), "{spec}: {e}");
                }
                Err(e) => assert!(e.contains("more than 100%"), "{spec}: {e}"),
            }
        }
        assert_eq!(
            r("train[-9223372036854775808:]", usize::MAX).unwrap(),
            usize::MAX - (1 << 63)..usize::MAX
        );
        assert_eq!(
            r("train[-5:]", usize::MAX).unwrap(),
            usize::MAX - 5..usize::MAX
        );
        assert_eq!(r("train[-100%:]", 9).unwrap(), 0..9);
    }

    /// Random and edge spellings, a bounded number of them: parsing and slicing never panic,
    /// and a range they give lies within the split.
    #[test]
    fn fuzzed_specs_never_panic() {
        const PIECES: [&str; 30] = [
            "train",
            "test",
            "[",
            "]",
            ":",
            "%",
            "-",
            "+",
            " ",
            "",
            "0",
            "1",
            "5",
            "100",
            "101",
            "9223372036854775807",
            "-9223372036854775808",
            "9223372036854775808",
            "18446744073709551616",
            "99999999999999999999999999999999",
            "1e3",
            "0x10",
            ".",
            "é",
            "🙂",
            "\u{0}",
            "[[",
            "]]",
            "::",
            "%%",
        ];
        const SIZES: [usize; 6] = [0, 1, 7, 1000, i64::MAX as usize, usize::MAX];
        let mut state: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = move || {
            // xorshift64*: deterministic, so a failure reproduces.
            state ^= state >> 12;
            state ^= state << 25;
            state ^= state >> 27;
            state.wrapping_mul(0x2545_f491_4f6c_dd1d)
        };
        for _ in 0..20_000 {
            let len = (next() % 9) as usize;
            let mut spec: String = (0..len)
                .map(|_| PIECES[(next() % PIECES.len() as u64) as usize])
                .collect();
            if next() % 2 == 0 {
                // Mostly well-formed brackets, so that the bounds are what varies.
                let a = PIECES[(next() % PIECES.len() as u64) as usize];
                let b = PIECES[(next() % PIECES.len() as u64) as usize];
                spec = format!(
                    "train[{a}{}:{b}{}]",
                    ["", "%"][(next() % 2) as usize],
                    ["", "%"][(next() % 2) as usize]
                );
            }
            let outcome = std::panic::catch_unwind(|| {
                let Ok(parsed) = SplitSpec::parse(&spec) else {
                    return;
                };
                for n in SIZES {
                    if let Ok(range) = parsed.range(n) {
                        assert!(
                            range.start <= range.end && range.end <= n,
                            "{spec} of {n}: {range:?}"
                        );
                    }
                }
            });
            assert!(outcome.is_ok(), "split spec {spec:?} panicked");
        }
    }

    #[test]
    fn rejects_bad_specs() {
        assert!(r("train[:11]", 10).unwrap_err().contains("out of range"));
        assert!(SplitSpec::parse("train[3]").is_err());
        assert!(SplitSpec::parse("train[:x]").is_err());
        assert!(SplitSpec::parse("train[1:5%]").is_err());
        assert!(SplitSpec::parse("train[:5").is_err());
        assert!(SplitSpec::parse("train+test").is_err());
        assert!(SplitSpec::parse("[:5]").is_err());
        assert!(SplitSpec::parse("train[:150%]").is_err());
    }
}
