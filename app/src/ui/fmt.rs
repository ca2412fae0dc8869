//! Number formatting for people. Exact values stay available to scripts in each metric's `data-value`.

/// A number with sensible precision for its size: `3915.16` → `3,915`, `27.42` → `27.4`, `0.1625` → `0.163`.
pub fn num(v: f64) -> String {
    if !v.is_finite() {
        return "—".to_string();
    }
    let a = v.abs();
    let digits = if a >= 1000.0 {
        0
    } else if a >= 100.0 {
        1
    } else if a >= 1.0 {
        2
    } else if a == 0.0 {
        0
    } else {
        3
    };
    group(&format!("{v:.digits$}"))
}

/// A count, grouped and without decimals: `1234` → `1,234`, `6` → `6`.
pub fn count(v: f64) -> String {
    if !v.is_finite() {
        return "—".to_string();
    }
    group(&format!("{v:.0}"))
}

/// A ratio 0–1 as a percentage: `0.1626` → `16.3 %`.
pub fn pct(v: f64) -> String {
    if !v.is_finite() {
        return "—".to_string();
    }
    format!("{:.1} %", v * 100.0)
}

/// Milliseconds, switching to seconds from 10 s: `812.4` → `812 ms`, `10235.3` → `10.2 s`.
pub fn ms(v: f64) -> String {
    if !v.is_finite() {
        return "—".to_string();
    }
    if v.abs() >= 10_000.0 {
        format!("{:.1} s", v / 1000.0)
    } else {
        format!("{} ms", num(v))
    }
}

/// A signed relative change `b` vs `a`: `+12.5 %`; `—` when `a` is zero.
pub fn delta_pct(a: f64, b: f64) -> String {
    if !(a.is_finite() && b.is_finite()) || a == 0.0 {
        return "—".to_string();
    }
    let d = (b - a) / a.abs() * 100.0;
    if d.abs() < 0.05 {
        "±0 %".to_string()
    } else {
        format!("{d:+.1} %")
    }
}

/// Thousands separators on the integer part of a formatted number.
fn group(s: &str) -> String {
    let (sign, rest) = s.strip_prefix('-').map_or(("", s), |r| ("-", r));
    let (int, frac) = rest.split_once('.').map_or((rest, None), |(i, f)| (i, Some(f)));
    let mut out = String::new();
    for (i, c) in int.chars().enumerate() {
        if i > 0 && (int.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    match frac {
        Some(f) => format!("{sign}{out}.{f}"),
        None => format!("{sign}{out}"),
    }
}

/// Four significant digits, without exponent for everyday magnitudes.
pub fn sig4(v: f64) -> String {
    if v == 0.0 || !v.is_finite() {
        return format!("{v}");
    }
    let mag = v.abs().log10().floor() as i32;
    if !(-4..6).contains(&mag) {
        return format!("{v:.3e}");
    }
    let decimals = (3 - mag).max(0) as usize;
    format!("{v:.decimals$}")
}

/// A Unix time (ms) as the browser's local date and time, `Dec 6, 14:02` (UTC `HH:MM` outside a browser).
pub fn local_clock(ms: u64) -> String {
    #[cfg(target_arch = "wasm32")]
    {
        let d = js_sys::Date::new(&wasm_bindgen::JsValue::from_f64(ms as f64));
        const MONTHS: [&str; 12] = [
            "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
        ];
        format!(
            "{} {}, {:02}:{:02}",
            MONTHS[(d.get_month() as usize).min(11)],
            d.get_date(),
            d.get_hours(),
            d.get_minutes()
        )
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        let min = ms / 60_000;
        format!("{:02}:{:02} UTC", (min / 60) % 24, min % 60)
    }
}

#[cfg(test)]
mod tests {
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use super::*;

    #[test]
    fn formats_by_magnitude() {
        assert_eq!(num(3915.16), "3,915");
        assert_eq!(num(27.42), "27.42");
        assert_eq!(num(123.456), "123.5");
        assert_eq!(num(0.1625), "0.163");
        assert_eq!(num(0.0), "0");
        assert_eq!(num(-1234567.0), "-1,234,567");
        assert_eq!(num(f64::NAN), "—");
        assert_eq!(pct(0.1626), "16.3 %");
        assert_eq!(ms(10235.3), "10.2 s");
        assert_eq!(ms(812.4), "812.4 ms");
        assert_eq!(delta_pct(100.0, 112.5), "+12.5 %");
        assert_eq!(delta_pct(0.0, 1.0), "—");
    }

    #[test]
    fn counts_have_no_decimals() {
        assert_eq!(
            (count(6.0), count(1234.0), count(0.0)),
            ("6".into(), "1,234".into(), "0".into())
        );
        assert_eq!(count(f64::NAN), "—");
    }
}
