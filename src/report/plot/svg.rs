//! Draws a plot `Scene` as SVG text: one `<g>` per group with its id, class and a `<title>`
//! tooltip, so a browser shows exact numbers on hover and tests can find every series and mark.

use std::fmt::Write as _;

use super::font::SVG_FAMILY;
use super::scene::{Anchor, Scene, Shape, Stroke};
use crate::report::xml_escape;

/// The SVG document for `scene`.
pub fn render(scene: &Scene) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="{SVG_FAMILY}">"#,
        w = scene.width,
        h = scene.height
    );
    let _ = writeln!(o, "<desc>{}</desc>", xml_escape(&scene.description));
    for g in &scene.groups {
        let _ = writeln!(o, r#"<g id="{}" class="{}">"#, xml_escape(&g.id), g.class);
        if let Some(t) = &g.title {
            let _ = writeln!(o, "<title>{}</title>", xml_escape(t));
        }
        for s in &g.shapes {
            shape(&mut o, s);
        }
        o.push_str("</g>\n");
    }
    o.push_str("</svg>\n");
    o
}

fn stroke_attrs(s: &Option<Stroke>) -> String {
    match s {
        None => r#" stroke="none""#.to_string(),
        Some(s) => {
            let mut a = format!(
                r#" stroke="{}" stroke-width="{}" stroke-linejoin="round""#,
                s.color.hex(),
                s.width
            );
            if let Some([d, g]) = s.dash {
                let _ = write!(a, r#" stroke-dasharray="{d} {g}""#);
            }
            a
        }
    }
}

fn shape(o: &mut String, s: &Shape) {
    match s {
        Shape::Hover { x, y, w, h, title } => {
            let _ = writeln!(
                o,
                r##"<rect x="{x:.1}" y="{y:.1}" width="{w:.1}" height="{h:.1}" fill="#ffffff" fill-opacity="0"><title>{}</title></rect>"##,
                xml_escape(title)
            );
        }
        Shape::Rect {
            x,
            y,
            w,
            h,
            fill,
            opacity,
        } => {
            let _ = write!(
                o,
                r#"<rect x="{x:.1}" y="{y:.1}" width="{w:.1}" height="{h:.1}" fill="{}""#,
                fill.hex()
            );
            if *opacity < 1.0 {
                let _ = write!(o, r#" fill-opacity="{opacity}""#);
            }
            o.push_str("/>\n");
        }
        Shape::Path {
            points,
            closed,
            fill,
            stroke,
        } => {
            let tag = if *closed { "polygon" } else { "polyline" };
            let _ = write!(o, r#"<{tag} points=""#);
            for (i, (x, y)) in points.iter().enumerate() {
                if i > 0 {
                    o.push(' ');
                }
                let _ = write!(o, "{x:.1},{y:.1}");
            }
            let _ = writeln!(
                o,
                r#"" fill="{}"{}/>"#,
                fill.map_or("none".to_string(), |c| c.hex()),
                stroke_attrs(stroke)
            );
        }
        Shape::Band {
            points,
            fill,
            opacity,
        } => {
            o.push_str(r#"<polygon points=""#);
            for (i, (x, y)) in points.iter().enumerate() {
                if i > 0 {
                    o.push(' ');
                }
                let _ = write!(o, "{x:.1},{y:.1}");
            }
            let _ = writeln!(
                o,
                r#"" fill="{}" fill-opacity="{opacity}" stroke="none"/>"#,
                fill.hex()
            );
        }
        Shape::Circle {
            cx,
            cy,
            r,
            fill,
            stroke,
        } => {
            let _ = writeln!(
                o,
                r#"<circle cx="{cx:.1}" cy="{cy:.1}" r="{r}" fill="{}"{}/>"#,
                fill.map_or("none".to_string(), |c| c.hex()),
                stroke_attrs(stroke)
            );
        }
        Shape::Text {
            x,
            y,
            text,
            size,
            anchor,
            color,
        } => {
            let anchor = match anchor {
                Anchor::Start => "start",
                Anchor::Middle => "middle",
                Anchor::End => "end",
            };
            let _ = writeln!(
                o,
                r#"<text x="{x:.1}" y="{y:.1}" font-size="{size}" text-anchor="{anchor}" fill="{}">{}</text>"#,
                color.hex(),
                xml_escape(text)
            );
        }
    }
}
