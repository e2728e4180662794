//! Plain-Rust reference implementations of the shipped rewards, the ground truth that the Rhai
//! script and the native plugin are tested against.

/// Default `target_min` of the length-ratio reward.
pub const LEN_RATIO_TARGET_MIN: f64 = 2.0;
/// Default `target_max` of the length-ratio reward.
pub const LEN_RATIO_TARGET_MAX: f64 = 3.0;

/// The length-ratio joint reward of CoMLRL's seed task.
///
/// With `len1`, `len2` the character counts (Unicode scalar values, like Python's `len`) of
/// `c1` and `c2`: 0 if `len1 == 0`; otherwise with `ratio = len2 / len1`, 1 inside
/// `[target_min, target_max]` (bounds included), else `exp(-d)` where `d` is the distance from
/// `ratio` to the nearest bound.
pub fn len_ratio(c1: &str, c2: &str, target_min: f64, target_max: f64) -> f64 {
    len_ratio_counts(
        c1.chars().count(),
        c2.chars().count(),
        target_min,
        target_max,
    )
}

/// [`len_ratio`] on character counts.
pub fn len_ratio_counts(len1: usize, len2: usize, target_min: f64, target_max: f64) -> f64 {
    if len1 == 0 {
        return 0.0;
    }
    let ratio = len2 as f64 / len1 as f64;
    if ratio < target_min {
        (-(target_min - ratio)).exp()
    } else if ratio > target_max {
        (-(ratio - target_max)).exp()
    } else {
        1.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cases() {
        assert_eq!(len_ratio("", "abc", 2.0, 3.0), 0.0);
        assert_eq!(len_ratio("ab", "abcd", 2.0, 3.0), 1.0);
        assert_eq!(len_ratio("ab", "abcdef", 2.0, 3.0), 1.0);
        assert!((len_ratio("ab", "ab", 2.0, 3.0) - (-1f64).exp()).abs() < 1e-15);
        assert!((len_ratio("a", "abcde", 2.0, 3.0) - (-2f64).exp()).abs() < 1e-15);
        // chars, not bytes: "日本" is 2 chars (6 bytes)
        assert_eq!(len_ratio("é", "日本", 2.0, 3.0), 1.0);
    }
}
