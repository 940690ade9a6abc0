//! What a plot is made of, independent of the file it ends up in: rectangles, paths, circles
//! and text in pixel coordinates, in named groups (SVG keeps the names; PNG draws in order).

/// An sRGB colour.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Color(pub u8, pub u8, pub u8);

impl Color {
    pub fn hex(self) -> String {
        format!("#{:02x}{:02x}{:02x}", self.0, self.1, self.2)
    }
}

/// How a line is drawn.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Stroke {
    pub color: Color,
    pub width: f32,
    /// Dash and gap lengths; `None` is solid.
    pub dash: Option<[f32; 2]>,
}

impl Stroke {
    pub fn solid(color: Color, width: f32) -> Stroke {
        Stroke {
            color,
            width,
            dash: None,
        }
    }

    pub fn dashed(color: Color, width: f32, dash: f32, gap: f32) -> Stroke {
        Stroke {
            color,
            width,
            dash: Some([dash, gap]),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Anchor {
    Start,
    Middle,
    End,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Shape {
    Rect {
        x: f32,
        y: f32,
        w: f32,
        h: f32,
        fill: Color,
        opacity: f32,
    },
    /// A polyline, or a polygon when `closed`.
    Path {
        points: Vec<(f32, f32)>,
        closed: bool,
        fill: Option<Color>,
        stroke: Option<Stroke>,
    },
    Circle {
        cx: f32,
        cy: f32,
        r: f32,
        fill: Option<Color>,
        stroke: Option<Stroke>,
    },
    /// A filled outline with no stroke, see-through (a churn band).
    Band {
        points: Vec<(f32, f32)>,
        fill: Color,
        opacity: f32,
    },
    /// An invisible hit area with a tooltip (drawn by the SVG only): the exact reading under
    /// the pointer.
    Hover {
        x: f32,
        y: f32,
        w: f32,
        h: f32,
        title: String,
    },
    /// `y` is the baseline.
    Text {
        x: f32,
        y: f32,
        text: String,
        size: f32,
        anchor: Anchor,
        color: Color,
    },
}

/// A named part of the plot: a series, a mark, the axes.
#[derive(Debug, Clone, PartialEq)]
pub struct Group {
    /// Unique in the plot, e.g. `series-device_used_bytes`, `mark-oom-1`.
    pub id: String,
    /// `series`, `mark`, `phase`, `axis`, `legend`, `title`, `plan`.
    pub class: &'static str,
    /// A tooltip with the exact numbers.
    pub title: Option<String>,
    pub shapes: Vec<Shape>,
}

impl Group {
    pub fn new(id: impl Into<String>, class: &'static str) -> Group {
        Group {
            id: id.into(),
            class,
            title: None,
            shapes: Vec::new(),
        }
    }

    pub fn titled(mut self, title: impl Into<String>) -> Group {
        self.title = Some(title.into());
        self
    }

    pub fn line(&mut self, points: Vec<(f32, f32)>, stroke: Stroke) {
        self.shapes.push(Shape::Path {
            points,
            closed: false,
            fill: None,
            stroke: Some(stroke),
        });
    }

    pub fn rect(&mut self, x: f32, y: f32, w: f32, h: f32, fill: Color, opacity: f32) {
        self.shapes.push(Shape::Rect {
            x,
            y,
            w,
            h,
            fill,
            opacity,
        });
    }

    pub fn text(
        &mut self,
        x: f32,
        y: f32,
        text: impl Into<String>,
        size: f32,
        anchor: Anchor,
        color: Color,
    ) {
        self.shapes.push(Shape::Text {
            x,
            y,
            text: text.into(),
            size,
            anchor,
            color,
        });
    }
}

/// A whole plot.
#[derive(Debug, Clone, PartialEq)]
pub struct Scene {
    pub width: f32,
    pub height: f32,
    /// A line for the file's metadata (tool, version, format version).
    pub description: String,
    pub groups: Vec<Group>,
}
