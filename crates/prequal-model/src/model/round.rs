//! [`round_to_u64`], the float-to-integer rounding the models use when they turn a sampled
//! number of nanoseconds into a `Duration`.

/// `v.round() as u64` (halves away from zero, negative and NaN to 0, saturating), without the
/// call into libm that `f64::round` costs on the baseline x86-64 target.
pub fn round_to_u64(v: f64) -> u64 {
    /// From 2^52 on, every `f64` is a whole number.
    const WHOLE: f64 = 4_503_599_627_370_496.0;
    if v.is_nan() || v < 0.0 {
        return 0;
    }
    if v >= WHOLE {
        return v as u64;
    }
    // Below 2^52 the truncation and the fraction left are both exact.
    let whole = v as u64;
    whole + u64::from(v - whole as f64 >= 0.5)
}

#[cfg(test)]
mod tests {
    use super::round_to_u64;

    #[test]
    fn round_to_u64_matches_round_then_cast() {
        let mut values = vec![
            0.0,
            -0.0,
            0.49999999999999994,
            0.5,
            1.5,
            2.5,
            -0.4,
            -0.5,
            -3.7,
            1e300,
            -1e300,
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
            4503599627370495.5,
            4503599627370496.0,
            9007199254740993.0,
            1.8446744073709552e19,
            2e19,
            f64::MIN_POSITIVE,
        ];
        let mut x = 0.3_f64;
        for _ in 0..100_000 {
            // A spread of magnitudes and fractions.
            x = (x * 7.919 + 0.123).fract();
            values.push(x * 10f64.powi((x * 1e6) as i32 % 20));
        }
        for v in values {
            assert_eq!(round_to_u64(v), v.round() as u64, "{v:e}");
        }
    }
}
