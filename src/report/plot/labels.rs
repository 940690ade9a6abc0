//! Placing text on the plot so that no label covers another label or a mark: each label names
//! the places it may go, best first, and takes the first one still free.

use super::font;
use super::scene::{Anchor, Color, Group};

const WHITE: Color = Color(0xff, 0xff, 0xff);

/// An axis-aligned box in pixels.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Box2 {
    pub x0: f32,
    pub y0: f32,
    pub x1: f32,
    pub y1: f32,
}

impl Box2 {
    /// The box a label of `text` at `size`, anchored at (`x`, baseline `y`), covers.
    pub fn of_text(x: f32, y: f32, text: &str, size: f32, anchor: Anchor) -> Box2 {
        let w = font::text_width(text, size);
        let left = match anchor {
            Anchor::Start => x,
            Anchor::Middle => x - w / 2.0,
            Anchor::End => x - w,
        };
        Box2 {
            x0: left - 2.0,
            y0: y - size,
            x1: left + w + 2.0,
            y1: y + size * 0.3,
        }
    }

    /// The area `self` and `other` share.
    pub fn overlap(&self, other: &Box2) -> f32 {
        let w = self.x1.min(other.x1) - self.x0.max(other.x0);
        let h = self.y1.min(other.y1) - self.y0.max(other.y0);
        if w > 0.0 && h > 0.0 { w * h } else { 0.0 }
    }
}

/// One place a label may go: its anchor point (`y` is the baseline) and how it hangs from it.
#[derive(Debug, Clone, Copy)]
pub struct Spot {
    pub x: f32,
    pub y: f32,
    pub anchor: Anchor,
}

impl Spot {
    pub fn new(x: f32, y: f32, anchor: Anchor) -> Spot {
        Spot { x, y, anchor }
    }
}

/// The boxes taken so far, and the area labels must stay inside.
pub struct Placer {
    taken: Vec<Box2>,
    bounds: Box2,
}

impl Placer {
    pub fn new(bounds: Box2) -> Placer {
        Placer {
            taken: Vec::new(),
            bounds,
        }
    }

    /// Keeps labels off `b` (a mark).
    pub fn reserve(&mut self, b: Box2) {
        self.taken.push(b);
    }

    /// Keeps labels off a square of half-width `r` around a mark at (`x`, `y`).
    pub fn reserve_mark(&mut self, x: f32, y: f32, r: f32) {
        self.reserve(Box2 {
            x0: x - r,
            y0: y - r,
            x1: x + r,
            y1: y + r,
        });
    }

    fn inside(&self, b: &Box2) -> bool {
        b.x0 >= self.bounds.x0
            && b.x1 <= self.bounds.x1
            && b.y0 >= self.bounds.y0
            && b.y1 <= self.bounds.y1
    }

    /// The first of `spots` where `text` covers nothing taken and stays inside the bounds;
    /// failing that, the one that covers least. The label's box is then taken.
    pub fn choose(&mut self, spots: &[Spot], text: &str, size: f32) -> Spot {
        let mut best: Option<(f32, Spot)> = None;
        for s in spots {
            let b = Box2::of_text(s.x, s.y, text, size, s.anchor);
            let covered: f32 = self.taken.iter().map(|t| t.overlap(&b)).sum::<f32>()
                + if self.inside(&b) { 0.0 } else { 1e6 };
            if covered == 0.0 {
                best = Some((0.0, *s));
                break;
            }
            if best.is_none_or(|(c, _)| covered < c) {
                best = Some((covered, *s));
            }
        }
        let (_, s) = best.expect("at least one spot");
        self.reserve(Box2::of_text(s.x, s.y, text, size, s.anchor));
        s
    }

    /// Places `text` at the first free spot and draws it on a white backdrop.
    pub fn label(
        &mut self,
        g: &mut Group,
        spots: &[Spot],
        text: String,
        size: f32,
        color: Color,
    ) -> Spot {
        let s = self.choose(spots, &text, size);
        backdrop_text(g, s, text, size, color);
        s
    }
}

/// Text on a white backdrop, so a label stays readable where it crosses a line.
pub fn backdrop_text(g: &mut Group, s: Spot, text: String, size: f32, color: Color) {
    let b = Box2::of_text(s.x, s.y, &text, size, s.anchor);
    g.rect(b.x0, s.y - size, b.x1 - b.x0, size * 1.3, WHITE, 0.8);
    g.text(s.x, s.y, text, size, s.anchor, color);
}

/// `text` cut (with an ellipsis) to fit `width` pixels, or `None` when not even that fits.
pub fn fit(text: &str, size: f32, width: f32) -> Option<String> {
    if font::text_width(text, size) <= width {
        return Some(text.to_string());
    }
    let end = font::prefix_fitting(text, "…", size, width);
    (text[..end].chars().count() >= 3).then(|| format!("{}…", &text[..end]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fit_cuts_to_the_longest_prefix_that_fits_in_one_pass() {
        assert_eq!(fit("serving", 11.0, 500.0).as_deref(), Some("serving"));
        let cut = fit("decode-phase-with-a-long-name", 11.0, 80.0).unwrap();
        assert!(cut.ends_with('…') && cut.len() < 29, "{cut}");
        assert!(font::text_width(&cut, 11.0) <= 80.0);
        // One more character would not fit.
        let n = cut.chars().count() - 1;
        let longer: String = "decode-phase-with-a-long-name"
            .chars()
            .take(n + 1)
            .collect();
        assert!(font::text_width(&format!("{longer}…"), 11.0) > 80.0);
        assert_eq!(
            fit("abcdef", 11.0, 10.0),
            None,
            "fewer than 3 characters: no label"
        );
        // 1 MiB of name is measured once, not once per prefix.
        let huge = "é".repeat(1 << 20);
        let cut = fit(&huge, 17.0, 900.0).unwrap();
        assert!(cut.chars().count() < 200);
    }

    #[test]
    fn a_label_moves_to_the_next_free_spot() {
        let mut p = Placer::new(Box2 {
            x0: 0.0,
            y0: 0.0,
            x1: 500.0,
            y1: 500.0,
        });
        p.reserve_mark(100.0, 100.0, 6.0);
        let spots = [
            Spot::new(95.0, 104.0, Anchor::Start),
            Spot::new(95.0, 140.0, Anchor::Start),
        ];
        let s = p.choose(&spots, "device total 4.00 GiB", 11.0);
        assert_eq!(s.y, 140.0);
    }
}
