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

/// A follower's name in each script the font draws.
const DRAWN: [&str; 9] = [
    "Łukasz Wójcik",
    "Çağla Öztürk",
    "Antonín Dvořák",
    "Nguyễn Thị Ánh",
    "Олена Шевченко",
    "Ἀλέξανδρος Παπαδόπουλος",
    "דנה כהן",
    "Zoë O'Brien-Ørsted",
    "Þórunn Ævarsdóttir",
];

fn glyphs(text: &str) -> Vec<GlyphId> {
    layout(&normalised(text), 20.0)
        .map(|l| l.glyphs.into_iter().map(|(g, _)| g).collect())
        .unwrap_or_default()
}

#[test]
fn every_drawn_script_has_its_glyphs_and_no_box() {
    for name in DRAWN {
        let ids = glyphs(name);
        assert_eq!(ids.len(), normalised(name).chars().count(), "{name}");
        assert!(ids.iter().all(|g| g.0 != 0), "{name}: a .notdef glyph");
        assert!(drawable_name(name).is_some(), "{name}");
    }
    // Our own words, in every language, too.
    for l in Language::ALL {
        let w = l.words();
        for text in [
            w.new_follower,
            w.follows_you,
            w.see_whos_new,
            w.your_followers,
            w.hot,
            w.popular,
            "…",
            "+",
        ] {
            assert!(layout(text, 20.0).is_some(), "{l:?}: {text}");
        }
    }
}

#[test]
fn scripts_it_cannot_draw_get_the_neutral_card_never_a_box() {
    for name in [
        "王芳",
        "أحمد",
        "Ada 王",
        "佐藤 さくら",
        "김민준",
        "👩‍💻",
        "अनिल",
    ] {
        assert!(drawable_name(name).is_none(), "{name}");
        for l in Language::ALL {
            assert_eq!(
                pick_card("u1", Some(name), l),
                pick_card("u1", None, l),
                "{name}"
            );
        }
    }
}

#[test]
fn a_decomposed_name_draws_as_its_composed_form() {
    for name in DRAWN {
        let nfd: String = name.nfd().collect();
        let nfc: String = name.nfc().collect();
        assert_eq!(
            pick_card("u1", Some(&nfd), Language::En),
            pick_card("u1", Some(&nfc), Language::En),
            "{name}"
        );
    }
    // "Dvořák" decomposed is a different string, drawn the same.
    let nfd = "Dvor\u{30C}a\u{301}k";
    assert_ne!(nfd, "Dvořák");
    assert_eq!(glyphs(nfd), glyphs("Dvořák"));
    assert_eq!(glyphs(nfd).len(), 6);
}

#[test]
fn hebrew_is_drawn_right_to_left() {
    let font = font();
    let id = |c| font.glyph_id(c);
    // דנה: ד first in reading order, rightmost on the card.
    assert_eq!(glyphs("דנה"), vec![id('ה'), id('נ'), id('ד')]);
    // A Latin surname after a Hebrew name keeps its own order; the Hebrew run is first
    // (rightmost) in a right-to-left line.
    assert_eq!(
        glyphs("דנה Li"),
        vec![id('L'), id('i'), id(' '), id('ה'), id('נ'), id('ד')]
    );
    assert_eq!(
        glyphs("Dana דנה"),
        vec![
            id('D'),
            id('a'),
            id('n'),
            id('a'),
            id(' '),
            id('ה'),
            id('נ'),
            id('ד')
        ]
    );
    // A point stays with its letter: שָׁלוֹם.
    let ids = glyphs("ש\u{5C1}\u{5B8}לו\u{5B9}ם");
    assert_eq!(ids[0], id('ם'));
    assert_eq!(ids[ids.len() - 3], id('ש'));
    // Brackets mirror in right-to-left text.
    assert_eq!(glyphs("(דנה)")[0], id('('));
}

#[test]
fn captions_follow_the_language() {
    let cards: Vec<Image> = Language::ALL
        .iter()
        .map(|l| pick_card("u1", Some("Ada"), *l))
        .collect();
    assert_ne!(cards[0], cards[1]);
    assert_ne!(cards[1], cards[2]);
    assert_ne!(
        pick_card("u1", None, Language::Fr),
        pick_card("u1", None, Language::De)
    );
    assert_ne!(fallback_card(Language::En), fallback_card(Language::Fr));
    assert_ne!(hot_badge(Language::En), hot_badge(Language::De));
    assert_eq!(Language::Fr.words().follows_you, "vous suit");
    assert_eq!(Language::De.words().follows_you, "folgt dir");
    assert_eq!(Language::En.words().follows_you, "follows you");
    assert_eq!(Language::of_locale("fr-CA"), Language::Fr);
    assert_eq!(Language::of_locale("de_AT"), Language::De);
    assert_eq!(Language::of_locale("pt"), Language::En);
    assert_eq!(Language::from_code("xx"), None);
    // One language for each of the bundled digest's, and no other.
    let mut codes: Vec<&str> = Language::ALL.iter().map(|l| l.code()).collect();
    codes.sort_unstable();
    let bundled = crate::ports::LoadedDefinition::bundled().unwrap();
    assert_eq!(codes, bundled.definition.templates.languages);
}

#[test]
fn images_are_small_pngs_at_twice_their_size() {
    let d = DENSITY;
    assert_eq!(
        dimensions(&pick_card("u1", Some("Ada Lovelace"), Language::En)),
        (CARD_WIDTH * d, CARD_HEIGHT * d)
    );
    assert_eq!(
        dimensions(&fallback_card(Language::De)),
        (CARD_WIDTH * d, CARD_HEIGHT * d)
    );
    for l in Language::ALL {
        for b in [hot_badge(l), popular_badge(l)] {
            assert_eq!(dimensions(&b), (BADGE_WIDTH * d, BADGE_HEIGHT * d));
            assert!(b.bytes.len() < 2_000, "{l:?} badge {}", b.bytes.len());
        }
    }
    assert_eq!(dimensions(&no_badge()), (BADGE_WIDTH * d, BADGE_HEIGHT * d));
    assert_eq!(dimensions(&transparent_pixel()), (1, 1));
    // CRC of IHDR, checked against the known value of the standard's polynomial.
    assert_eq!(crc32(b"123456789"), 0xcbf4_3926);
    // The sizes, for docs/open-time-content.md (`--no-capture` shows them).
    for name in DRAWN
        .iter()
        .copied()
        .chain(["Zoë with a very long name indeed, longer than any card"])
    {
        let card = pick_card("u1", Some(name), Language::Fr);
        assert!(card.bytes.len() < 8_000, "{name}: {}", card.bytes.len());
        eprintln!("card {name}: {} bytes", card.bytes.len());
    }
    for l in Language::ALL {
        eprintln!(
            "{l:?}: neutral card {}, fallback {}, hot {}, popular {} bytes",
            pick_card("u1", None, l).bytes.len(),
            fallback_card(l).bytes.len(),
            hot_badge(l).bytes.len(),
            popular_badge(l).bytes.len()
        );
    }
    assert_ne!(
        pick_card("u1", Some("Ada"), Language::En),
        pick_card("u1", Some("Bob"), Language::En)
    );
}

#[test]
fn long_text_is_cut_with_an_ellipsis_within_the_card() {
    let long = "Wolfgang Amadeus Mozart-Schwarzenberg von Hohenlohe";
    let line = fitted(long, &NAME_SIZES, text_room()).unwrap();
    assert!(line.width <= text_room());
    assert_eq!(line.glyphs.last().map(|g| g.0), Some(font().glyph_id('…')));
    // A name of any length is cut before layout (its owner chose it).
    let huge = "Ab".repeat(10_000);
    let line = fitted(&huge, &NAME_SIZES, text_room()).unwrap();
    assert!(line.width <= text_room());
    assert_eq!(line.glyphs.last().map(|g| g.0), Some(font().glyph_id('…')));
    let short = fitted("Ada", &NAME_SIZES, text_room()).unwrap();
    assert_eq!(short.scale, PxScale::from(NAME_SIZES[0]));
    // Hostile text: markup, controls and invisible characters draw or are left out.
    assert!(drawable_name("<b>Ada</b> & \u{200D}\u{202E}Bob").is_some());
    assert!(drawable_name("\u{200B}\u{FEFF}").is_none());
}
