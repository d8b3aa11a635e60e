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
    assert_eq!(nice_max(14.7), 20.0);
    assert_eq!(nice_max(0.0), 1.0);
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
