//! What a rendered email is, and how a URL and a subject are written into it.

use minijinja::Value;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rendered {
    pub subject: String,
    pub html: String,
    pub text: String,
    /// The language whose templates wrote it.
    pub locale: String,
}

/// A URL built from a checked base URL and a base64url token, as the HTML carries it: `&`
/// is the only character HTML needs escaped in it (escaping `/` too would garble the link).
pub(crate) fn html_url(url: &str) -> Value {
    Value::from_safe_string(url.replace('&', "&amp;"))
}

/// A rendered subject as a header carries it: trimmed, on one line, printable (a line
/// break of any kind, a tab or another control character from a template or a value is a
/// space or gone, never a header line of its own or a byte a mail client shows as junk).
pub(crate) fn subject_line(subject: &str) -> String {
    crate::domain::text::printable(subject.trim()).replace(['\u{2028}', '\u{2029}'], " ")
}

#[cfg(test)]
pub(crate) mod tests {
    /// Names that test the escaping and the sentinels: markup, quotes, entities, template
    /// syntax, emoji, right-to-left and CJK text, sentinel characters, spaces, a long name.
    pub(crate) fn hostile_names() -> Vec<String> {
        let mut names: Vec<String> = [
            "Ada",
            "",
            " ",
            "  Ada  Lovelace ",
            "O'Brien \"Bob\" & <Co> / 1 > 0",
            "&amp; &lt;b&gt; &#x2f; &quot;",
            "</mj-text><mj-raw><script>alert(1)</script></mj-raw>",
            "<!-- comment --> <![CDATA[x]]>",
            "{{ name }} {% if true %}x{% endif %} {# c #}",
            "Zoë 👩‍💻 🇫🇷 李小龍 山田太郎",
            "مرحبا بالعالم",
            "שלום \u{200F}עולם\u{200E}",
            "\u{E000}0\u{E001}",
            "\u{E000}",
            "a\u{E001}b\u{E000}99\u{E001}",
            "tab\tnew\nline\r\0nul\u{7}",
            "\u{FEFF}\u{00A0}nbsp",
            "=3D=\r\n",
            "Bob\u{FFFF}\u{FFFE}",
        ]
        .into_iter()
        .map(str::to_owned)
        .collect();
        names.push("Wolfeschlegelsteinhausenbergerdorff ".repeat(150));
        names.push("é".repeat(997));
        names
    }
}
