//! `ln`, `exp` and a rounded `log2` that give the same bits on every machine.
//!
//! Every rank computes the engine choice on its own from agreed inputs, so the
//! functions on that path must agree to the last bit: a one-ulp difference at a
//! threshold would send one rank into `MPI_Alltoallv` while another issues gets, and
//! the job would hang. glibc's `exp`/`ln`/`log2` pick an FMA or a non-FMA variant by
//! CPU, and ranks may run different libm builds (container images), so the standard
//! functions do not promise that. These use only IEEE-754 `+ - * /` (which Rust never
//! contracts into FMA) and bit manipulation, each correctly rounded, so the result is
//! a function of the input alone. They are accurate to a few ulps, which is far more
//! than a cost model needs.

use std::f64::consts::{LN_2, SQRT_2};

/// Natural logarithm; NaN below 0, -inf at 0, +inf at +inf.
pub fn ln(x: f64) -> f64 {
    if x.is_nan() || x < 0.0 {
        return f64::NAN;
    }
    if x == 0.0 {
        return f64::NEG_INFINITY;
    }
    if x.is_infinite() {
        return x;
    }
    let (mantissa, exponent) = split(x);
    // mantissa in [sqrt(1/2), sqrt(2)): ln(m) = 2 atanh(s), s = (m - 1) / (m + 1),
    // |s| <= 0.1716, so s^2 <= 0.0295 and 20 terms leave far less than an ulp.
    let s = (mantissa - 1.0) / (mantissa + 1.0);
    let s2 = s * s;
    let mut series = 0.0;
    for k in (0..20).rev() {
        series = series * s2 + 1.0 / (2 * k + 1) as f64;
    }
    exponent as f64 * LN_2 + 2.0 * s * series
}

/// e^x; 0 far below, +inf far above.
pub fn exp(x: f64) -> f64 {
    if x.is_nan() {
        return x;
    }
    if x > 709.0 {
        return f64::INFINITY;
    }
    if x < -708.0 {
        return 0.0;
    }
    // x = n ln2 + r, |r| <= ln2 / 2; ln2 in two parts so that n * LN2_HIGH is exact.
    const LN2_HIGH: f64 = 0.693_147_180_369_123_8; // the top 32 bits of ln 2
    const LN2_LOW: f64 = 1.908_214_929_270_587_7e-10;
    let n = (x / LN_2).round();
    let r = (x - n * LN2_HIGH) - n * LN2_LOW;
    // Taylor to degree 20: |r|^21 / 21! is below 1e-24.
    let mut sum = 1.0;
    for k in (1..=20).rev() {
        sum = 1.0 + sum * r / k as f64;
    }
    sum * pow2(n as i32)
}

/// 1 + log2(x) rounded to the nearest integer (halves up), 0 below 1: a size class.
pub fn log2_class(x: f64) -> usize {
    if x.is_nan() || x < 1.0 {
        return 0;
    }
    // round(log2 x) = floor(log2(x sqrt 2)): the binary exponent of x * sqrt(2).
    let scaled = x * SQRT_2;
    if scaled.is_infinite() {
        return 1 + f64::MAX_EXP as usize;
    }
    // scaled >= sqrt(2) is normal: its biased exponent field is floor(log2) + 1023.
    1 + (((scaled.to_bits() >> 52) & 0x7ff) - 1023) as usize
}

/// x = m 2^e with m in [sqrt(1/2), sqrt(2)), for finite x > 0.
fn split(x: f64) -> (f64, i32) {
    // Subnormals: scale into the normal range first.
    let (x, bias) = if x < f64::MIN_POSITIVE { (x * pow2(64), -64) } else { (x, 0) };
    let bits = x.to_bits();
    let exponent = ((bits >> 52) & 0x7ff) as i32 - 1023;
    let mantissa = f64::from_bits((bits & !(0x7ff << 52)) | (1023 << 52)); // in [1, 2)
    if mantissa >= SQRT_2 { (mantissa / 2.0, exponent + 1 + bias) } else { (mantissa, exponent + bias) }
}

/// 2^n, exact, for n in the range `exp` needs (-1075 .. 1024).
fn pow2(n: i32) -> f64 {
    if n > 1023 {
        return f64::INFINITY;
    }
    if n >= -1022 {
        return f64::from_bits(((n + 1023) as u64) << 52);
    }
    // Subnormal results: in two exact steps.
    f64::from_bits(((n + 1023 + 64) as u64) << 52) * f64::from_bits((1023 - 64) << 52)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64, ulps: f64) -> bool {
        (a - b).abs() <= ulps * f64::EPSILON * b.abs().max(f64::MIN_POSITIVE)
    }

    #[test]
    fn ln_matches_the_standard_function_to_a_few_ulps() {
        let mut x = 1e-300;
        while x < 1e300 {
            for m in [1.0, 1.1, std::f64::consts::SQRT_2, 1.5, 2.9, 7.3] {
                let v = x * m;
                assert!(close(ln(v), v.ln(), 4.0) || (ln(v) - v.ln()).abs() < 1e-15, "ln({v}) = {} vs {}", ln(v), v.ln());
            }
            x *= 13.7;
        }
        assert_eq!(ln(1.0), 0.0);
        assert!(ln(-1.0).is_nan() && ln(0.0) == f64::NEG_INFINITY && ln(f64::INFINITY) == f64::INFINITY);
        assert!(close(ln(f64::MIN_POSITIVE / 8.0), (f64::MIN_POSITIVE / 8.0).ln(), 4.0));
    }

    #[test]
    fn exp_matches_the_standard_function_to_a_few_ulps() {
        let mut x = -700.0;
        while x < 700.0 {
            assert!(close(exp(x), x.exp(), 8.0), "exp({x}) = {} vs {}", exp(x), x.exp());
            x += 0.737;
        }
        for x in [0.0, 1e-12, -1e-12, 0.5, -0.5, 1.0, 3.3] {
            assert!(close(exp(x), x.exp(), 4.0), "exp({x})");
        }
        assert_eq!(exp(0.0), 1.0);
        assert!(exp(1000.0).is_infinite() && exp(-1000.0) == 0.0 && exp(f64::NAN).is_nan());
        assert!(close(exp(ln(123.456)), 123.456, 16.0));
    }

    #[test]
    fn log2_class_rounds_to_the_nearest_power_of_two() {
        assert_eq!(log2_class(0.0), 0);
        assert_eq!(log2_class(0.99), 0);
        assert_eq!(log2_class(f64::NAN), 0);
        for k in 0..60 {
            let p = (1u64 << k) as f64;
            assert_eq!(log2_class(p), 1 + k, "2^{k}");
            // Just below and above the geometric midpoints to the neighbours.
            assert_eq!(log2_class(p * SQRT_2 * (1.0 - 1e-12)), 1 + k);
            assert_eq!(log2_class(p * SQRT_2 * (1.0 + 1e-12)), 2 + k);
        }
        for x in [1.0, 3.0, 5.0, 100.0, 1000.0, 4096.0, 5000.0, 1e9] {
            assert_eq!(log2_class(x), 1 + (x.log2() + 0.5).floor() as usize, "{x}");
        }
    }
}
