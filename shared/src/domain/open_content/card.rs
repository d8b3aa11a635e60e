//! The images of open-time content, drawn here as small indexed PNGs (no image service, no
//! font files): a pick's card (an initial in a coloured circle, the name, a caption), the
//! fallback card, the "hot" and "popular" badges and the transparent "none". Text is drawn
//! with the 8x8 bitmap font of `font8x8` (Latin, Greek, Hiragana); a character it lacks is
//! drawn as a box. A card is about 550 bytes, a badge 170.

use font8x8::UnicodeFonts;

/// About the width a column of three gets in the email (it is shown near 1:1).
pub const CARD_WIDTH: u32 = 180;
pub const CARD_HEIGHT: u32 = 120;
pub const BADGE_WIDTH: u32 = 96;
pub const BADGE_HEIGHT: u32 = 24;

const WHITE: [u8; 3] = [0xff, 0xff, 0xff];
const BORDER: [u8; 3] = [0xd9, 0xe2, 0xec];
const INK: [u8; 3] = [0x1f, 0x29, 0x33];
const MUTED: [u8; 3] = [0x61, 0x6e, 0x7c];
const AVATARS: [[u8; 3]; 8] = [
    [0x2f, 0x6f, 0xde],
    [0xd6, 0x45, 0x45],
    [0x2b, 0x8a, 0x3e],
    [0x86, 0x4b, 0xd1],
    [0xc2, 0x6a, 0x12],
    [0x0f, 0x76, 0x8c],
    [0xb8, 0x32, 0x80],
    [0x52, 0x60, 0x6d],
];

/// An image: its bytes and content type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Image {
    pub bytes: Vec<u8>,
}

impl Image {
    pub const CONTENT_TYPE: &'static str = "image/png";
}

struct Canvas {
    width: u32,
    height: u32,
    pixels: Vec<u8>,
}

impl Canvas {
    fn new(width: u32, height: u32, background: u8) -> Self {
        Self {
            width,
            height,
            pixels: vec![background; (width * height) as usize],
        }
    }

    fn set(&mut self, x: i64, y: i64, colour: u8) {
        if x >= 0 && y >= 0 && (x as u32) < self.width && (y as u32) < self.height {
            self.pixels[(y as u32 * self.width + x as u32) as usize] = colour;
        }
    }

    fn rect(&mut self, x: i64, y: i64, w: i64, h: i64, colour: u8) {
        for yy in y..y + h {
            for xx in x..x + w {
                self.set(xx, yy, colour);
            }
        }
    }

    fn disc(&mut self, cx: i64, cy: i64, r: i64, colour: u8) {
        for y in -r..=r {
            for x in -r..=r {
                if x * x + y * y <= r * r {
                    self.set(cx + x, cy + y, colour);
                }
            }
        }
    }

    /// Draws `text` from (x, y) at `scale`; returns the width drawn.
    fn text(&mut self, x: i64, y: i64, scale: i64, colour: u8, text: &str) -> i64 {
        let mut pen = x;
        for c in text.chars() {
            let glyph = glyph(c);
            for (row, bits) in glyph.iter().enumerate() {
                for col in 0..8 {
                    if bits & (1 << col) != 0 {
                        self.rect(
                            pen + col * scale,
                            y + row as i64 * scale,
                            scale,
                            scale,
                            colour,
                        );
                    }
                }
            }
            pen += 8 * scale;
        }
        pen - x
    }

    fn png(&self, palette: &[[u8; 3]], transparent: Option<u8>) -> Image {
        let mut raw = Vec::with_capacity(((self.width + 1) * self.height) as usize);
        for row in self.pixels.chunks(self.width as usize) {
            raw.push(0); // no filter
            raw.extend_from_slice(row);
        }
        let mut out = b"\x89PNG\r\n\x1a\n".to_vec();
        let mut header = Vec::new();
        header.extend_from_slice(&self.width.to_be_bytes());
        header.extend_from_slice(&self.height.to_be_bytes());
        header.extend_from_slice(&[8, 3, 0, 0, 0]); // 8-bit indexed
        chunk(&mut out, b"IHDR", &header);
        chunk(&mut out, b"PLTE", &palette.concat());
        if let Some(index) = transparent {
            let mut alpha = vec![255u8; usize::from(index) + 1];
            alpha[usize::from(index)] = 0;
            chunk(&mut out, b"tRNS", &alpha);
        }
        chunk(
            &mut out,
            b"IDAT",
            &miniz_oxide::deflate::compress_to_vec_zlib(&raw, 9),
        );
        chunk(&mut out, b"IEND", &[]);
        Image { bytes: out }
    }
}

fn glyph(c: char) -> [u8; 8] {
    font8x8::BASIC_FONTS
        .get(c)
        .or_else(|| font8x8::LATIN_FONTS.get(c))
        .or_else(|| font8x8::GREEK_FONTS.get(c))
        .or_else(|| font8x8::HIRAGANA_FONTS.get(c))
        // A box: the font lacks it (most scripts); the card still reads.
        .unwrap_or([0x00, 0x7e, 0x42, 0x42, 0x42, 0x42, 0x7e, 0x00])
}

fn chunk(out: &mut Vec<u8>, kind: &[u8; 4], data: &[u8]) {
    out.extend_from_slice(&(data.len() as u32).to_be_bytes());
    let start = out.len();
    out.extend_from_slice(kind);
    out.extend_from_slice(data);
    let crc = crc32(&out[start..]);
    out.extend_from_slice(&crc.to_be_bytes());
}

fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = 0xffff_ffffu32;
    for &b in bytes {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                0xedb8_8320 ^ (crc >> 1)
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// At most `max` characters, with "..." when cut (the font has no ellipsis).
fn fit(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        text.to_owned()
    } else {
        let mut cut: String = text.chars().take(max.saturating_sub(3)).collect();
        cut.push_str("...");
        cut
    }
}

/// A card: a circle with `initial` at the top, `title` and `caption` centred below.
fn card(title: &str, caption: &str, initial: char, colour: [u8; 3]) -> Image {
    // Palette: 0 white, 1 border, 2 ink, 3 muted, 4 avatar.
    let mut c = Canvas::new(CARD_WIDTH, CARD_HEIGHT, 0);
    let (w, h) = (i64::from(CARD_WIDTH), i64::from(CARD_HEIGHT));
    c.rect(0, 0, w, 1, 1);
    c.rect(0, h - 1, w, 1, 1);
    c.rect(0, 0, 1, h, 1);
    c.rect(w - 1, 0, 1, h, 1);
    c.disc(w / 2, 34, 24, 4);
    let initial = initial.to_uppercase().next().unwrap_or(initial).to_string();
    c.text(w / 2 - 12, 34 - 12, 3, 0, &initial);
    let centred = |c: &mut Canvas, y: i64, scale: i64, colour: u8, text: &str| {
        let width = text.chars().count() as i64 * 8 * scale;
        c.text((w - width) / 2, y, scale, colour, text);
    };
    // The name at twice the font's size when it fits, else at its size.
    let room = (w - 12) / 8;
    if title.chars().count() as i64 * 2 <= room {
        centred(&mut c, 68, 2, 2, title);
    } else {
        centred(&mut c, 72, 1, 2, &fit(title, room as usize));
    }
    centred(&mut c, 96, 1, 3, &fit(caption, room as usize));
    c.png(&[WHITE, BORDER, INK, MUTED, colour], None)
}

fn colour_for(id: &str) -> [u8; 3] {
    let hash = id.bytes().fold(2_166_136_261u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(16_777_619)
    });
    AVATARS[(hash % AVATARS.len() as u32) as usize]
}

/// The card of a pick: their name (or "A new follower") and "follows you".
pub fn pick_card(id: &str, name: Option<&str>) -> Image {
    let title = name.unwrap_or("A new follower");
    let initial = name.and_then(|n| n.trim().chars().next()).unwrap_or('?');
    card(title, "follows you", initial, colour_for(id))
}

/// The card of a slot without a pick (fewer followers to offer, or the fallback).
pub fn fallback_card() -> Image {
    card("See who's new", "your followers", '+', AVATARS[7])
}

fn badge(label: &str, colour: [u8; 3]) -> Image {
    // Palette: 0 transparent, 1 pill, 2 white text.
    let mut c = Canvas::new(BADGE_WIDTH, BADGE_HEIGHT, 0);
    let text_width = label.chars().count() as i64 * 8;
    let w = text_width + 16;
    c.rect(0, 0, w, i64::from(BADGE_HEIGHT), 1);
    c.text(8, 8, 1, 2, label);
    c.png(&[WHITE, colour, WHITE], Some(0))
}

pub fn hot_badge() -> Image {
    badge("HOT", [0xd6, 0x45, 0x45])
}

pub fn popular_badge() -> Image {
    badge("POPULAR", [0x2f, 0x6f, 0xde])
}

/// A badge-sized image with nothing to see.
pub fn no_badge() -> Image {
    Canvas::new(BADGE_WIDTH, BADGE_HEIGHT, 0).png(&[WHITE], Some(0))
}

/// A 1x1 transparent image: what a refused token gets instead of a broken image.
pub fn transparent_pixel() -> Image {
    Canvas::new(1, 1, 0).png(&[WHITE], Some(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dimensions(png: &Image) -> (u32, u32) {
        let b = &png.bytes;
        assert_eq!(&b[..8], b"\x89PNG\r\n\x1a\n");
        assert_eq!(&b[12..16], b"IHDR");
        (
            u32::from_be_bytes(b[16..20].try_into().unwrap()),
            u32::from_be_bytes(b[20..24].try_into().unwrap()),
        )
    }

    #[test]
    fn images_are_pngs_of_their_size_with_valid_chunks() {
        assert_eq!(
            dimensions(&pick_card("u1", Some("Ada Lovelace"))),
            (CARD_WIDTH, CARD_HEIGHT)
        );
        assert_eq!(dimensions(&fallback_card()), (CARD_WIDTH, CARD_HEIGHT));
        for b in [hot_badge(), popular_badge(), no_badge()] {
            assert_eq!(dimensions(&b), (BADGE_WIDTH, BADGE_HEIGHT));
        }
        assert_eq!(dimensions(&transparent_pixel()), (1, 1));
        // CRC of IHDR, checked against the known value of the standard's polynomial.
        assert_eq!(crc32(b"123456789"), 0xcbf4_3926);
        let card = pick_card("u1", Some("李 Zoë with a very long name indeed"));
        assert!(card.bytes.len() < 4_000, "{}", card.bytes.len());
        assert_ne!(pick_card("u1", Some("Ada")), pick_card("u1", Some("Bob")));
    }

    #[test]
    fn long_text_is_cut() {
        assert_eq!(fit("abcdefg", 6), "abc...");
        assert_eq!(fit("abc", 4), "abc");
    }
}
