use super::*;

#[test]
fn charts_scale_to_their_data_and_escape_labels() {
    let chart = line_chart(
        "<rate>",
        &[Series {
            label: "a & b".into(),
            points: vec![(0.0, 1.0), (2.0, 9.0)],
        }],
        "x",
        "y",
        Some((14.0, "ceiling")),
    );
    assert!(chart.contains("&lt;rate&gt;") && chart.contains("a &amp; b"));
    assert!(chart.contains(r#"class="reference""#));
    let bars = bar_chart(
        "t",
        &[Bar {
            label: "v".into(),
            value: 5.0,
            interval: Some((4.0, 6.0)),
        }],
        "%",
    );
    assert!(bars.contains(r#"class="bar""#) && bars.contains(r#"class="interval""#));
    assert_eq!(
        histogram([0, 59_999, 120_000].into_iter(), 0, 60_000),
        [(0.0, 2.0), (1.0, 0.0), (2.0, 1.0)]
    );
}

fn labels(max: f64) -> Vec<String> {
    Axis::covering(max).ticks().map(|(_, l)| l).collect()
}

#[test]
fn axes_tick_at_one_two_five_steps() {
    assert_eq!(labels(42.0), ["0", "10", "20", "30", "40", "50"]);
    // Where the old rule drew 0, 12.50, 25, 37.50, 50.
    assert_eq!(labels(47.0), ["0", "10", "20", "30", "40", "50"]);
    assert_eq!(labels(15.4), ["0", "5", "10", "15", "20"]);
    assert_eq!(labels(7.0), ["0", "2", "4", "6", "8"]);
    assert_eq!(labels(1.0), ["0.0", "0.2", "0.4", "0.6", "0.8", "1.0"]);
    assert_eq!(labels(3.0), ["0", "1", "2", "3"]);
    assert_eq!(labels(0.3), ["0.0", "0.1", "0.2", "0.3"]);
    assert_eq!(labels(0.9), ["0.0", "0.2", "0.4", "0.6", "0.8", "1.0"]);
    assert_eq!(labels(0.0123), ["0.000", "0.005", "0.010", "0.015"]);
    assert_eq!(labels(1234.0), ["0", "500", "1000", "1500"]);
    assert_eq!(labels(100.0), ["0", "20", "40", "60", "80", "100"]);
    assert_eq!(labels(2.5e6).len(), 6);
}

#[test]
fn every_step_is_one_two_or_five_times_a_power_of_ten() {
    let mut max = 1e-4;
    while max < 1e9 {
        let axis = Axis::covering(max);
        let mantissa = axis.step / 10f64.powf((axis.step.log10() + 1e-9).floor());
        assert!(
            [1.0, 2.0, 5.0].iter().any(|m| (mantissa - m).abs() < 1e-6),
            "{max}: step {}",
            axis.step
        );
        assert!(axis.top() >= max * (1.0 - 1e-9), "{max}: {axis:?}");
        assert!(
            (1..=MAX_INTERVALS).contains(&axis.intervals),
            "{max}: {axis:?}"
        );
        max *= 1.37;
    }
}

#[test]
fn an_empty_or_broken_range_still_draws_an_axis() {
    for max in [0.0, -3.0, f64::NAN, f64::INFINITY] {
        assert_eq!(labels(max), labels(1.0), "{max}");
    }
}

#[test]
fn the_charts_label_their_ticks_round() {
    let chart = line_chart(
        "opens",
        &[Series {
            label: "all".into(),
            points: vec![(0.0, 3.0), (13.0, 47.0)],
        }],
        "minute",
        "opens",
        None,
    );
    for round in [">10<", ">20<", ">30<", ">40<", ">50<", ">15<"] {
        assert!(chart.contains(round), "{round} in {chart}");
    }
    assert!(
        !chart.contains("12.50") && !chart.contains("6.50"),
        "{chart}"
    );
}
