//! The one font every plot is laid out and drawn with: DejaVu Sans, embedded (see
//! `assets/fonts/`), so a PNG needs no system font and SVG labels are placed with the same
//! widths a browser will use when it has DejaVu Sans (and close ones when it falls back).

use std::sync::OnceLock;

use ab_glyph::{Font, FontRef, PxScale, ScaleFont};

static DEJAVU_SANS: &[u8] = include_bytes!("../../../assets/fonts/DejaVuSans.ttf");

/// The family SVG asks for, with fallbacks of similar width.
pub const SVG_FAMILY: &str = "DejaVu Sans, Verdana, Bitstream Vera Sans, sans-serif";

/// The embedded font, parsed once.
pub fn font() -> &'static FontRef<'static> {
    static FONT: OnceLock<FontRef<'static>> = OnceLock::new();
    FONT.get_or_init(|| FontRef::try_from_slice(DEJAVU_SANS).expect("the embedded font parses"))
}

/// The ab_glyph scale for a CSS font size (pixels per em).
pub fn px_scale(size: f32) -> PxScale {
    let f = font();
    let em = f.units_per_em().unwrap_or(2048.0);
    PxScale::from(size * f.height_unscaled() / em)
}

/// The longest prefix of `text` whose width, with `suffix` after it, is at most `width`
/// pixels: its length in bytes. One pass over the text (kerning included), so a name of any
/// length costs time in proportion to it.
pub fn prefix_fitting(text: &str, suffix: &str, size: f32, width: f32) -> usize {
    let f = font().as_scaled(px_scale(size));
    let room = width - text_width(suffix, size);
    let mut w = 0.0;
    let mut prev = None;
    let mut end = 0;
    for (i, c) in text.char_indices() {
        let id = f.glyph_id(c);
        if let Some(p) = prev {
            w += f.kern(p, id);
        }
        w += f.h_advance(id);
        prev = Some(id);
        // The kerning between the prefix and the suffix is a fraction of a pixel: left out.
        if w > room {
            break;
        }
        end = i + c.len_utf8();
    }
    end
}

/// The advance width of `text` at `size` pixels per em, kerning included.
pub fn text_width(text: &str, size: f32) -> f32 {
    let f = font().as_scaled(px_scale(size));
    let mut w = 0.0;
    let mut prev = None;
    for c in text.chars() {
        let id = f.glyph_id(c);
        if let Some(p) = prev {
            w += f.kern(p, id);
        }
        w += f.h_advance(id);
        prev = Some(id);
    }
    w
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn widths_grow_with_text_and_size() {
        let a = text_width("1 GiB", 12.0);
        assert!(a > 20.0 && a < 50.0, "{a}");
        assert!(text_width("1 GiB", 24.0) > 1.9 * a);
        assert_eq!(text_width("", 12.0), 0.0);
    }
}
