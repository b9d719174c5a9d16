//! SVG line charts for every result (plotters, no system fonts needed for SVG).

use std::error::Error;
use std::path::Path;

use plotters::prelude::*;

/// One line of a chart.
#[derive(Clone, Debug)]
pub struct Series {
    pub label: String,
    pub points: Vec<(f64, f64)>,
}

pub struct Chart<'a> {
    pub title: &'a str,
    pub x_label: &'a str,
    pub y_label: &'a str,
    /// Clamp the y axis (e.g. write cost explodes near 100 % utilization).
    pub y_max: Option<f64>,
    pub log_y: bool,
    /// Where the legend goes; pick the corner the curves leave empty.
    pub legend: SeriesLabelPosition,
}

const COLORS: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(23, 190, 207),
    RGBColor(188, 189, 34),
    RGBColor(127, 127, 127),
];

pub fn line_chart(path: &Path, chart: &Chart, series: &[Series]) -> Result<(), Box<dyn Error>> {
    let points = series.iter().flat_map(|s| s.points.iter());
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for &(x, y) in points {
        x0 = x0.min(x);
        x1 = x1.max(x);
        if y.is_finite() {
            y0 = y0.min(y);
            y1 = y1.max(y);
        }
    }
    if x0 > x1 {
        return Err("nothing to plot".into());
    }
    if x0 == x1 {
        x1 = x0 + 1.0;
    }
    if let Some(m) = chart.y_max {
        y1 = y1.min(m);
    }
    y0 = if chart.log_y {
        y0.max(1e-6)
    } else {
        y0.min(0.0)
    };
    if y1 <= y0 {
        y1 = y0 + 1.0;
    }
    let root = SVGBackend::new(path, (800, 500)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut builder = ChartBuilder::on(&root);
    builder
        .caption(chart.title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60);
    let x_range = x0..x1;
    if chart.log_y {
        let mut ctx = builder.build_cartesian_2d(x_range, (y0..y1 * 1.05).log_scale())?;
        ctx.configure_mesh()
            .x_desc(chart.x_label)
            .y_desc(chart.y_label)
            .draw()?;
        draw_series(&mut ctx, series, y1)?;
        ctx.configure_series_labels()
            .position(chart.legend.clone())
            .background_style(WHITE)
            .border_style(BLACK)
            .draw()?;
    } else {
        let mut ctx = builder.build_cartesian_2d(x_range, y0..y1 * 1.05)?;
        ctx.configure_mesh()
            .x_desc(chart.x_label)
            .y_desc(chart.y_label)
            .draw()?;
        draw_series(&mut ctx, series, y1)?;
        ctx.configure_series_labels()
            .position(chart.legend.clone())
            .background_style(WHITE)
            .border_style(BLACK)
            .draw()?;
    }
    root.present()?;
    Ok(())
}

fn draw_series<'a, DB: DrawingBackend + 'a, X, Y>(
    ctx: &mut ChartContext<'a, DB, Cartesian2d<X, Y>>,
    series: &[Series],
    y_clip: f64,
) -> Result<(), Box<dyn Error>>
where
    X: plotters::coord::ranged1d::Ranged<ValueType = f64>,
    Y: plotters::coord::ranged1d::Ranged<ValueType = f64>,
    DB::ErrorType: 'static,
{
    for (i, s) in series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let pts: Vec<(f64, f64)> = s
            .points
            .iter()
            .filter(|p| p.1.is_finite())
            .map(|&(x, y)| (x, y.min(y_clip)))
            .collect();
        ctx.draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))?
            .label(s.label.clone())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
            });
        ctx.draw_series(pts.into_iter().map(|p| Circle::new(p, 2, color.filled())))?;
    }
    Ok(())
}

/// Grouped bars: one group per entry of `groups`, one bar per series in each group.
pub fn bar_chart(
    path: &Path,
    title: &str,
    y_label: &str,
    groups: &[String],
    series: &[(String, Vec<f64>)],
) -> Result<(), Box<dyn Error>> {
    let y_max = series
        .iter()
        .flat_map(|s| s.1.iter().copied())
        .filter(|y| y.is_finite())
        .fold(1.0, f64::max);
    let root = SVGBackend::new(path, (900, 500)).into_drawing_area();
    root.fill(&WHITE)?;
    let n = groups.len() as f64;
    let mut ctx = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0f64..n, 0f64..y_max * 1.5)?;
    let names = groups.to_vec();
    ctx.configure_mesh()
        .disable_x_mesh()
        .x_labels(groups.len() * 2 + 1)
        .x_label_formatter(&|x| {
            let i = x.floor() as usize;
            if (x - x.floor() - 0.5).abs() < 0.01 && i < names.len() {
                names[i].clone()
            } else {
                String::new()
            }
        })
        .y_desc(y_label)
        .draw()?;
    let width = 0.8 / series.len().max(1) as f64;
    for (k, (label, values)) in series.iter().enumerate() {
        let color = COLORS[k % COLORS.len()];
        ctx.draw_series(values.iter().enumerate().map(|(i, &v)| {
            let x0 = i as f64 + 0.1 + k as f64 * width;
            Rectangle::new([(x0, 0.0), (x0 + width * 0.9, v)], color.filled())
        }))?
        .label(label.clone())
        .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], color.filled()));
    }
    ctx.configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE)
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}
