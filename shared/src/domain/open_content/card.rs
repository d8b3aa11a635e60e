//! The images of open-time content, drawn here as small indexed PNGs (no image service): a
//! pick's card (an initial in a coloured circle, the name, a caption), the fallback card,
//! the "hot" and "popular" badges and the transparent "none", in the email's language.
//!
//! Text is drawn antialiased by `ab_glyph` (pure Rust, the font parsed lazily: cheap at cold
//! start) with a subset of DejaVu Sans bundled in `shared/fonts` (Latin with its extensions,
//! Greek, Cyrillic, Hebrew; `infra/fonts/subset.sh` makes it). Images are drawn at twice the
//! size the email shows them, for high-density screens. A name is NFC-normalised first (a
//! name stored decomposed draws as the same pixels) and laid out in Unicode's bidirectional
//! order, so Hebrew reads right to left. A name with a character the font lacks (Chinese,
//! Japanese, Korean: thousands of glyphs, megabytes; Arabic and the other joining scripts,
//! which `ab_glyph` cannot shape, so their letters would show unjoined) is not drawn at all:
//! the card says "A new follower" in the email's language, never a box or a mis-shaped word.

use ab_glyph::{point, Font, FontRef, GlyphId, PxScale, ScaleFont};
use std::collections::{HashMap, HashSet};
use std::sync::LazyLock;
use unicode_normalization::char::is_combining_mark;
use unicode_normalization::UnicodeNormalization;

/// The size the email shows a card at (a column of three, near 1:1); drawn at `DENSITY` x.
pub const CARD_WIDTH: u32 = 180;
pub const CARD_HEIGHT: u32 = 120;
pub const BADGE_WIDTH: u32 = 96;
pub const BADGE_HEIGHT: u32 = 24;
/// Pixels per CSS pixel of the email.
pub const DENSITY: u32 = 2;

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
const HOT: [u8; 3] = [0xd6, 0x45, 0x45];
const POPULAR: [u8; 3] = [0x2f, 0x6f, 0xde];

static FONT_BYTES: &[u8] = include_bytes!("../../../fonts/DejaVuSans-cards.ttf");

/// The bundled font; only its table directory is read here, glyphs when first drawn.
fn font() -> &'static FontRef<'static> {
    static FONT: LazyLock<FontRef<'static>> = LazyLock::new(|| {
        FontRef::try_from_slice(FONT_BYTES).expect("the bundled font parses (a unit test reads it)")
    });
    &FONT
}

/// The language of an email's cards: one for each of the bundled digest's languages (a
/// test keeps them in step).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Language {
    #[default]
    En,
    Fr,
    De,
}

/// The words a card or badge shows.
#[derive(Debug)]
pub struct Words {
    pub new_follower: &'static str,
    pub follows_you: &'static str,
    pub see_whos_new: &'static str,
    pub your_followers: &'static str,
    pub hot: &'static str,
    pub popular: &'static str,
}

impl Language {
    pub const ALL: [Language; 3] = [Language::En, Language::Fr, Language::De];

    pub fn code(self) -> &'static str {
        match self {
            Self::En => "en",
            Self::Fr => "fr",
            Self::De => "de",
        }
    }

    /// The language a code names exactly ("fr"), if it is one of ours.
    pub fn from_code(code: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|l| l.code() == code)
    }

    /// The language of a locale the digest rendered in ("de", "fr-CA"); English otherwise.
    pub fn of_locale(locale: &str) -> Self {
        let primary = locale.split(['-', '_']).next().unwrap_or("");
        Self::from_code(&primary.trim().to_ascii_lowercase()).unwrap_or_default()
    }

    pub fn words(self) -> &'static Words {
        match self {
            Self::En => &Words {
                new_follower: "A new follower",
                follows_you: "follows you",
                see_whos_new: "See who's new",
                your_followers: "your followers",
                hot: "HOT",
                popular: "POPULAR",
            },
            // The digest's register: "vous" in French, "du" in German.
            Self::Fr => &Words {
                new_follower: "Un nouvel abonné",
                follows_you: "vous suit",
                see_whos_new: "Vos nouveaux abonnés",
                your_followers: "à découvrir",
                hot: "TENDANCE",
                popular: "POPULAIRE",
            },
            Self::De => &Words {
                new_follower: "Eine neue Person",
                follows_you: "folgt dir",
                see_whos_new: "Wer ist neu?",
                your_followers: "Personen, die dir folgen",
                hot: "ANGESAGT",
                popular: "BELIEBT",
            },
        }
    }
}

/// An image: its bytes and content type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Image {
    pub bytes: Vec<u8>,
}

impl Image {
    pub const CONTENT_TYPE: &'static str = "image/png";
}

/// RGBA; alpha is 0 or 255 but where a shape's edge meets a transparent background.
type Rgba = [u8; 4];

fn opaque(c: [u8; 3]) -> Rgba {
    [c[0], c[1], c[2], 255]
}

/// Coverage steps kept: enough for smooth edges, few enough for a small palette.
const LEVELS: f32 = 15.0;

struct Canvas {
    width: u32,
    height: u32,
    pixels: Vec<Rgba>,
}

impl Canvas {
    fn new(width: u32, height: u32, background: Rgba) -> Self {
        Self {
            width,
            height,
            pixels: vec![background; (width * height) as usize],
        }
    }

    /// `colour` over the pixel at `coverage` (0..=1), in `LEVELS` steps.
    fn blend(&mut self, x: i64, y: i64, colour: [u8; 3], coverage: f32) {
        if x < 0 || y < 0 || x as u32 >= self.width || y as u32 >= self.height {
            return;
        }
        let q = (coverage.clamp(0.0, 1.0) * LEVELS).round() / LEVELS;
        if q <= 0.0 {
            return;
        }
        let p = &mut self.pixels[(y as u32 * self.width + x as u32) as usize];
        // Over: the colour at q, what was there at what shows through.
        let below = f32::from(p[3]) / 255.0 * (1.0 - q);
        let alpha = q + below;
        for i in 0..3 {
            p[i] = ((f32::from(colour[i]) * q + f32::from(p[i]) * below) / alpha).round() as u8;
        }
        p[3] = (alpha * 255.0).round() as u8;
    }

    fn rect(&mut self, x: i64, y: i64, w: i64, h: i64, colour: [u8; 3]) {
        for yy in y..y + h {
            for xx in x..x + w {
                self.blend(xx, yy, colour, 1.0);
            }
        }
    }

    /// A disc, its edge antialiased.
    fn disc(&mut self, cx: f32, cy: f32, r: f32, colour: [u8; 3]) {
        let (x0, x1) = ((cx - r - 1.0) as i64, (cx + r + 1.0) as i64);
        let (y0, y1) = ((cy - r - 1.0) as i64, (cy + r + 1.0) as i64);
        for y in y0..=y1 {
            for x in x0..=x1 {
                let d = ((x as f32 + 0.5 - cx).powi(2) + (y as f32 + 0.5 - cy).powi(2)).sqrt();
                self.blend(x, y, colour, r + 0.5 - d);
            }
        }
    }

    /// A line laid out by `layout`, its pen starting at `x`, on baseline `y`.
    fn line(&mut self, line: &Line, x: f32, y: f32, colour: [u8; 3]) {
        let font = font();
        for &(id, gx) in &line.glyphs {
            let glyph = id.with_scale_and_position(line.scale, point(x + gx, y));
            if let Some(outline) = font.outline_glyph(glyph) {
                let b = outline.px_bounds();
                outline.draw(|px, py, c| {
                    self.blend(
                        b.min.x as i64 + i64::from(px),
                        b.min.y as i64 + i64::from(py),
                        colour,
                        c,
                    );
                });
            }
        }
    }

    /// A line centred on `cx`.
    fn centred(&mut self, line: &Line, cx: f32, y: f32, colour: [u8; 3]) {
        self.line(line, (cx - line.width / 2.0).round(), y, colour);
    }

    /// An indexed PNG: each distinct colour once in the palette (the transparent ones first,
    /// so the tRNS chunk stays short).
    fn png(&self) -> Image {
        let mut distinct: Vec<Rgba> = Vec::new();
        let mut seen: HashSet<Rgba> = HashSet::new();
        for p in &self.pixels {
            if seen.insert(*p) {
                distinct.push(*p);
            }
        }
        distinct.sort_unstable_by_key(|p| (p[3], p[0], p[1], p[2]));
        let mut palette: Vec<Rgba> = Vec::new();
        let mut index: HashMap<Rgba, u8> = HashMap::new();
        for colour in distinct {
            if palette.len() < 256 {
                index.insert(colour, palette.len() as u8);
                palette.push(colour);
            }
        }
        // Past 256 colours (no drawing here makes that many), the nearest kept one.
        let nearest = |c: &Rgba| -> u8 {
            (0..palette.len())
                .min_by_key(|&i| {
                    (0..4)
                        .map(|k| (i32::from(palette[i][k]) - i32::from(c[k])).pow(2))
                        .sum::<i32>()
                })
                .unwrap_or(0) as u8
        };
        let mut raw = Vec::with_capacity(((self.width + 1) * self.height) as usize);
        for row in self.pixels.chunks(self.width as usize) {
            raw.push(0); // no filter: best for indexed images
            raw.extend(
                row.iter()
                    .map(|p| index.get(p).copied().unwrap_or_else(|| nearest(p))),
            );
        }
        let mut out = b"\x89PNG\r\n\x1a\n".to_vec();
        let mut header = Vec::new();
        header.extend_from_slice(&self.width.to_be_bytes());
        header.extend_from_slice(&self.height.to_be_bytes());
        header.extend_from_slice(&[8, 3, 0, 0, 0]); // 8-bit indexed
        chunk(&mut out, b"IHDR", &header);
        let rgb: Vec<u8> = palette.iter().flat_map(|c| [c[0], c[1], c[2]]).collect();
        chunk(&mut out, b"PLTE", &rgb);
        let alpha: Vec<u8> = palette
            .iter()
            .map(|c| c[3])
            .take_while(|a| *a < 255)
            .collect();
        if !alpha.is_empty() {
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

/// Text ready to draw: glyphs in visual order, each with its pen offset from the start.
#[derive(Debug)]
struct Line {
    glyphs: Vec<(GlyphId, f32)>,
    width: f32,
    scale: PxScale,
}

/// Characters that steer text rather than show (joiners, direction marks, variation
/// selectors, a soft hyphen): left out of the drawing.
fn invisible(c: char) -> bool {
    matches!(c,
        '\u{00AD}' | '\u{034F}' | '\u{061C}' | '\u{180E}'
        | '\u{200B}'..='\u{200F}'
        | '\u{202A}'..='\u{202E}'
        | '\u{2060}'..='\u{206F}'
        | '\u{FE00}'..='\u{FE0F}'
        | '\u{FEFF}'
        | '\u{E0100}'..='\u{E01EF}')
}

/// What a name or caption is drawn from: NFC, invisible characters out, any space a space.
fn normalised(text: &str) -> String {
    text.nfc()
        .filter(|c| !invisible(*c))
        .map(|c| if c.is_whitespace() { ' ' } else { c })
        .collect::<String>()
        .trim()
        .to_owned()
}

/// Drawn mirrored in right-to-left text (the pairs a name may hold).
fn mirrored(c: char) -> char {
    match c {
        '(' => ')',
        ')' => '(',
        '[' => ']',
        ']' => '[',
        '{' => '}',
        '}' => '{',
        '<' => '>',
        '>' => '<',
        '«' => '»',
        '»' => '«',
        '‹' => '›',
        '›' => '‹',
        other => other,
    }
}

/// `text` (normalised) laid out at `px` in visual order: each run of the bidirectional
/// algorithm in turn, the clusters (a letter and its marks) of a right-to-left run reversed.
/// None when the font lacks a character (never a .notdef box).
fn layout(text: &str, px: f32) -> Option<Line> {
    let font = font();
    let scale = PxScale::from(px);
    let scaled = font.as_scaled(scale);
    let mut glyphs = Vec::new();
    let mut pen = 0.0f32;
    let bidi = unicode_bidi::BidiInfo::new(text, None);
    for para in &bidi.paragraphs {
        let (levels, runs) = bidi.visual_runs(para, para.range.clone());
        for run in runs {
            let rtl = levels[run.start].is_rtl();
            let mut clusters: Vec<Vec<char>> = Vec::new();
            for c in text[run].chars() {
                match clusters.last_mut() {
                    Some(cluster) if is_combining_mark(c) => cluster.push(c),
                    _ => clusters.push(vec![c]),
                }
            }
            if rtl {
                clusters.reverse();
            }
            for cluster in clusters {
                for (i, &c) in cluster.iter().enumerate() {
                    let c = if rtl && i == 0 { mirrored(c) } else { c };
                    let id = font.glyph_id(c);
                    if id.0 == 0 {
                        return None;
                    }
                    glyphs.push((id, pen));
                    // Marks have no advance: drawn over the letter before them.
                    pen += scaled.h_advance(id);
                }
            }
        }
    }
    Some(Line {
        glyphs,
        width: pen,
        scale,
    })
}

/// The characters of a text laid out at most: more than any card's line shows.
const MAX_CHARS: usize = 80;

/// `text` at the largest size from `sizes` whose line fits `room`, else at the last, cut
/// (whole clusters, in reading order) and ended with "…". None when the font lacks a
/// character.
fn fitted(text: &str, sizes: &[f32], room: f32) -> Option<Line> {
    // No line on a card holds more than a few dozen characters: a longer text (a name is
    // whatever its owner typed) is cut before layout, so the cutting below stays cheap.
    let (text, cut) = match text.char_indices().nth(MAX_CHARS) {
        Some((end, _)) => (&text[..end], true),
        None => (text, false),
    };
    let mut last = None;
    for &px in sizes {
        let line = layout(text, px)?;
        if line.width <= room && !cut {
            return Some(line);
        }
        last = Some((line, px));
    }
    let (mut line, px) = last?;
    if cut {
        line = layout(&format!("{}…", text.trim_end()), px)?;
    }
    let mut kept: Vec<char> = text.chars().collect();
    while line.width > room && !kept.is_empty() {
        kept.pop();
        while kept.last().is_some_and(|c| is_combining_mark(*c)) {
            kept.pop();
        }
        let cut: String = kept.iter().collect();
        line = layout(&format!("{}…", cut.trim_end()), px)?;
    }
    Some(line)
}

/// What the circle of a card holds.
enum Mark {
    Text(Line),
    /// Someone whose name is not drawn: a head and shoulders.
    Person,
}

/// A card: `mark` in a circle at the top, `title` and `caption` centred below.
fn card(title: &Line, caption: &Line, mark: &Mark, colour: [u8; 3]) -> Image {
    let d = DENSITY as f32;
    let (w, h) = (CARD_WIDTH * DENSITY, CARD_HEIGHT * DENSITY);
    let mut c = Canvas::new(w, h, opaque(WHITE));
    let edge = i64::from(DENSITY);
    let (wi, hi) = (i64::from(w), i64::from(h));
    c.rect(0, 0, wi, edge, BORDER);
    c.rect(0, hi - edge, wi, edge, BORDER);
    c.rect(0, 0, edge, hi, BORDER);
    c.rect(wi - edge, 0, edge, hi, BORDER);
    let (cx, cy, r) = (w as f32 / 2.0, 34.0 * d, 24.0 * d);
    c.disc(cx, cy, r, colour);
    match mark {
        Mark::Text(line) => {
            // Centred on the glyph's ink, not its advance box.
            let ink = ink_bounds(line);
            let (x, y) = (cx - (ink.0 + ink.2) / 2.0, cy - (ink.1 + ink.3) / 2.0);
            c.line(line, x.round(), y.round(), WHITE);
        }
        Mark::Person => {
            c.disc(cx, cy - 7.0 * d, 8.0 * d, WHITE);
            // Shoulders: the top of a disc, cut by the circle's edge.
            let (sy, sr) = (cy + 22.0 * d, 16.0 * d);
            let cover = |x: f32, y: f32, ox: f32, oy: f32, r: f32| {
                (r + 0.5 - ((x - ox).powi(2) + (y - oy).powi(2)).sqrt()).clamp(0.0, 1.0)
            };
            for y in (cy as i64)..=((cy + r) as i64 + 1) {
                for x in ((cx - r) as i64 - 1)..=((cx + r) as i64 + 1) {
                    let (px, py) = (x as f32 + 0.5, y as f32 + 0.5);
                    let inside = cover(px, py, cx, cy, r - 1.0);
                    c.blend(x, y, WHITE, cover(px, py, cx, sy, sr) * inside);
                }
            }
        }
    }
    c.centred(title, cx, 84.0 * d, INK);
    c.centred(caption, cx, 104.0 * d, MUTED);
    c.png()
}

/// The ink of a line drawn at (0, baseline 0): (min x, min y, max x, max y).
fn ink_bounds(line: &Line) -> (f32, f32, f32, f32) {
    let font = font();
    let mut b = (f32::MAX, f32::MAX, f32::MIN, f32::MIN);
    for &(id, gx) in &line.glyphs {
        if let Some(o) = font.outline_glyph(id.with_scale_and_position(line.scale, point(gx, 0.0)))
        {
            let r = o.px_bounds();
            b = (
                b.0.min(r.min.x),
                b.1.min(r.min.y),
                b.2.max(r.max.x),
                b.3.max(r.max.y),
            );
        }
    }
    if b.0 > b.2 {
        (0.0, 0.0, 0.0, 0.0)
    } else {
        b
    }
}

/// The sizes a name is tried at, largest first (device pixels).
const NAME_SIZES: [f32; 4] = [32.0, 28.0, 25.0, 22.0];
const CAPTION_SIZES: [f32; 3] = [22.0, 20.0, 18.0];
const INITIAL_SIZE: f32 = 52.0;

/// The room a line has on a card: its width less a margin each side.
fn text_room() -> f32 {
    ((CARD_WIDTH - 12) * DENSITY) as f32
}

/// One of our own words: the bundled font has every glyph they use (a test checks).
fn words_line(text: &str, sizes: &[f32], room: f32) -> Line {
    fitted(text, sizes, room).unwrap_or(Line {
        glyphs: Vec::new(),
        width: 0.0,
        scale: PxScale::from(sizes[0]),
    })
}

fn colour_for(id: &str) -> [u8; 3] {
    let hash = id.bytes().fold(2_166_136_261u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(16_777_619)
    });
    AVATARS[(hash % AVATARS.len() as u32) as usize]
}

/// A name as the card draws it: its line and its initial, or None when it is no name the
/// font can draw (then the card says "A new follower").
fn drawable_name(name: &str) -> Option<(Line, Line)> {
    let name = normalised(name);
    let title = fitted(&name, &NAME_SIZES, text_room())?;
    // The first letter with its marks, in capitals where the script has them.
    let mut chars = name.chars();
    let first = chars.next()?;
    let mut initial: String = {
        let upper: String = first.to_uppercase().collect();
        if upper.chars().count() == 1 {
            upper
        } else {
            first.to_string()
        }
    };
    initial.extend(chars.take_while(|c| is_combining_mark(*c)));
    let initial = layout(&initial.nfc().collect::<String>(), INITIAL_SIZE)?;
    Some((title, initial))
}

/// The card of a pick: their name (or "A new follower") and "follows you", in `language`.
pub fn pick_card(id: &str, name: Option<&str>, language: Language) -> Image {
    let words = language.words();
    let caption = words_line(words.follows_you, &CAPTION_SIZES, text_room());
    match name.and_then(drawable_name) {
        Some((title, initial)) => card(&title, &caption, &Mark::Text(initial), colour_for(id)),
        None => {
            let title = words_line(words.new_follower, &NAME_SIZES, text_room());
            card(&title, &caption, &Mark::Person, colour_for(id))
        }
    }
}

/// The card of a slot without a pick (fewer followers to offer, or the fallback).
pub fn fallback_card(language: Language) -> Image {
    let words = language.words();
    let title = words_line(words.see_whos_new, &NAME_SIZES, text_room());
    let caption = words_line(words.your_followers, &CAPTION_SIZES, text_room());
    let plus = words_line("+", &[INITIAL_SIZE], text_room());
    card(&title, &caption, &Mark::Text(plus), AVATARS[7])
}

/// A pill of `colour` with `label` in white, on a transparent badge.
fn badge(label: &str, colour: [u8; 3]) -> Image {
    let d = DENSITY as f32;
    let (w, h) = (BADGE_WIDTH * DENSITY, BADGE_HEIGHT * DENSITY);
    let mut c = Canvas::new(w, h, [0, 0, 0, 0]);
    let pad = 8.0 * d;
    let line = words_line(label, &[20.0, 18.0, 16.0], w as f32 - 2.0 * pad);
    let r = h as f32 / 2.0;
    let pill = (line.width + 2.0 * pad).max(h as f32).min(w as f32);
    c.disc(r, r, r, colour);
    c.disc(pill - r, r, r, colour);
    c.rect(
        r as i64,
        0,
        (pill - 2.0 * r).ceil() as i64,
        i64::from(h),
        colour,
    );
    let ink = ink_bounds(&line);
    let y = r - (ink.1 + ink.3) / 2.0;
    c.line(&line, pad.round(), y.round(), WHITE);
    c.png()
}

pub fn hot_badge(language: Language) -> Image {
    badge(language.words().hot, HOT)
}

pub fn popular_badge(language: Language) -> Image {
    badge(language.words().popular, POPULAR)
}

/// A badge-sized image with nothing to see.
pub fn no_badge() -> Image {
    Canvas::new(BADGE_WIDTH * DENSITY, BADGE_HEIGHT * DENSITY, [0, 0, 0, 0]).png()
}

/// A 1x1 transparent image: what a refused token gets instead of a broken image.
pub fn transparent_pixel() -> Image {
    Canvas::new(1, 1, [0, 0, 0, 0]).png()
}

#[cfg(test)]
mod tests;
