//! The preference centre's pages: plain HTML forms (no script), one `<main>` with a heading,
//! native checkboxes with their labels, buttons in reading order, system fonts, a layout
//! that fits a phone, and the same protective headers on every answer.

use crate::domain::topics::{Topic, Topics};
use crate::runtime::function_url::HttpResponse;

/// The languages the pages speak (the email templates' languages).
pub const LANGUAGES: [&str; 3] = ["en", "de", "fr"];

/// The closest language of ours to a stored locale or an `Accept-Language` header: the
/// range with the highest q-value (RFC 9110 12.5.4) that names one of ours, the first of
/// equals; `*` stands for each of ours the header does not name (after those it names);
/// q=0 means "not this one". A q that is not a q-value (`q=high`, `q=1.5`) is ignored, as
/// if absent (weight 1): a browser's typo must not lose the reader's language.
pub fn language(preferred: &str) -> &'static str {
    let mut named: Vec<(&'static str, u16)> = Vec::new();
    let mut star: Option<u16> = None;
    for range in preferred.split(',') {
        let mut parts = range.split(';');
        let tag = parts.next().unwrap_or("").trim();
        let q = parts
            .filter_map(|param| param.split_once('='))
            .find(|(name, _)| name.trim().eq_ignore_ascii_case("q"))
            .and_then(|(_, value)| qvalue(value.trim()))
            .unwrap_or(1000);
        if tag == "*" {
            star.get_or_insert(q);
            continue;
        }
        let primary = tag.split(['-', '_']).next().unwrap_or("");
        if let Some(ours) = LANGUAGES
            .into_iter()
            .find(|l| l.eq_ignore_ascii_case(primary))
        {
            named.push((ours, q));
        }
    }
    let unnamed: Vec<(&'static str, u16)> = match star {
        Some(q) => LANGUAGES
            .into_iter()
            .filter(|l| !named.iter().any(|(n, _)| n == l))
            .map(|l| (l, q))
            .collect(),
        None => Vec::new(),
    };
    let mut best: Option<(&'static str, u16)> = None;
    for (ours, q) in named.into_iter().chain(unnamed) {
        if q > 0 && best.is_none_or(|(_, b)| q > b) {
            best = Some((ours, q));
        }
    }
    best.map_or("en", |(l, _)| l)
}

/// A q-value in thousandths: `0`, `0.5`, `0.125`, `1`, `1.000`; None for anything else.
fn qvalue(text: &str) -> Option<u16> {
    let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
    if fraction.len() > 3 || !fraction.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let thousandths = format!("{fraction:0<3}").parse::<u16>().ok()?;
    match whole {
        "0" => Some(thousandths),
        "1" if thousandths == 0 => Some(1000),
        _ => None,
    }
}

/// Every sentence the pages say, in one language.
pub struct Words {
    pub title: &'static str,
    pub intro: &'static str,
    pub legend: &'static str,
    pub save: &'static str,
    pub all_heading: &'static str,
    pub all_hint: &'static str,
    pub all_button: &'static str,
    pub out_note: &'static str,
    /// `{}`: the topic's label.
    pub leave_question: &'static str,
    pub leave_button: &'static str,
    pub left_title: &'static str,
    pub saved_title: &'static str,
    pub now_receive: &'static str,
    pub no_longer: &'static str,
    pub nothing_changed: &'static str,
    pub welcome_back: &'static str,
    pub all_title: &'static str,
    pub all_body: &'static str,
    pub back: &'static str,
    pub invalid_title: &'static str,
    pub invalid_body: &'static str,
    pub gone_title: &'static str,
    pub gone_body: &'static str,
    pub bad_form_title: &'static str,
    /// `{}`: what was not understood.
    pub bad_form_body: &'static str,
    pub busy_title: &'static str,
    pub busy_body: &'static str,
    pub not_allowed_title: &'static str,
    pub not_allowed_body: &'static str,
}

const EN: Words = Words {
    title: "Email preferences",
    intro: "Choose the emails you want to receive at this address.",
    legend: "Emails",
    save: "Save preferences",
    all_heading: "Unsubscribe from everything",
    all_hint: "You will receive no more emails from us, whatever is ticked above.",
    all_button: "Unsubscribe from all emails",
    out_note: "You currently receive no emails from us. Tick what you want to receive and save.",
    leave_question: "Stop “{}”?",
    leave_button: "Unsubscribe from “{}”",
    left_title: "You are unsubscribed from “{}”",
    saved_title: "Your preferences are saved",
    now_receive: "You will now receive: {}",
    no_longer: "You will no longer receive: {}",
    nothing_changed: "Nothing changed.",
    welcome_back: "Welcome back.",
    all_title: "You are unsubscribed from all emails",
    all_body: "You will receive no more emails from us. You can come back at any time from your email preferences.",
    back: "Back to your email preferences",
    invalid_title: "This link does not work",
    invalid_body: "This link is not valid or has expired. Use the link in the most recent email you received from us, exactly as it is.",
    gone_title: "We could not find your subscription",
    gone_body: "There is no longer a subscription for this link, so you will receive no emails from us. There is nothing else to do.",
    bad_form_title: "Nothing was changed",
    bad_form_body: "The form sent something we do not know ({}). Open the link in your email again and use the form there.",
    busy_title: "Please try again",
    busy_body: "We could not save your choice just now. Nothing was changed. Please try again in a minute.",
    not_allowed_title: "Not allowed",
    not_allowed_body: "Open the link from your email in a browser.",
};

const DE: Words = Words {
    title: "E-Mail-Einstellungen",
    intro: "Wähle, welche E-Mails du an diese Adresse erhalten möchtest.",
    legend: "E-Mails",
    save: "Einstellungen speichern",
    all_heading: "Von allem abmelden",
    all_hint: "Du erhältst dann keine E-Mails mehr von uns, egal was oben ausgewählt ist.",
    all_button: "Von allen E-Mails abmelden",
    out_note: "Du erhältst zurzeit keine E-Mails von uns. Wähle aus, was du erhalten möchtest, und speichere.",
    leave_question: "„{}“ abbestellen?",
    leave_button: "„{}“ abbestellen",
    left_title: "Du hast „{}“ abbestellt",
    saved_title: "Deine Einstellungen sind gespeichert",
    now_receive: "Du erhältst jetzt: {}",
    no_longer: "Du erhältst nicht mehr: {}",
    nothing_changed: "Es hat sich nichts geändert.",
    welcome_back: "Willkommen zurück.",
    all_title: "Du bist von allen E-Mails abgemeldet",
    all_body: "Du erhältst keine E-Mails mehr von uns. In deinen E-Mail-Einstellungen kannst du jederzeit zurückkommen.",
    back: "Zurück zu deinen E-Mail-Einstellungen",
    invalid_title: "Dieser Link funktioniert nicht",
    invalid_body: "Dieser Link ist ungültig oder abgelaufen. Verwende den Link aus der neuesten E-Mail, die du von uns erhalten hast, genau so, wie er ist.",
    gone_title: "Wir konnten dein Abonnement nicht finden",
    gone_body: "Zu diesem Link gibt es kein Abonnement mehr, du erhältst also keine E-Mails von uns. Du musst nichts weiter tun.",
    bad_form_title: "Es wurde nichts geändert",
    bad_form_body: "Das Formular hat etwas gesendet, das wir nicht kennen ({}). Öffne den Link in deiner E-Mail erneut und verwende das Formular dort.",
    busy_title: "Bitte versuche es noch einmal",
    busy_body: "Wir konnten deine Auswahl gerade nicht speichern. Es wurde nichts geändert. Bitte versuche es in einer Minute noch einmal.",
    not_allowed_title: "Nicht erlaubt",
    not_allowed_body: "Öffne den Link aus deiner E-Mail in einem Browser.",
};

const FR: Words = Words {
    title: "Préférences e-mail",
    intro: "Choisissez les e-mails que vous souhaitez recevoir à cette adresse.",
    legend: "E-mails",
    save: "Enregistrer mes préférences",
    all_heading: "Se désabonner de tout",
    all_hint: "Vous ne recevrez plus aucun e-mail de notre part, quels que soient les choix ci-dessus.",
    all_button: "Me désabonner de tous les e-mails",
    out_note: "Vous ne recevez actuellement aucun e-mail de notre part. Cochez ce que vous souhaitez recevoir et enregistrez.",
    leave_question: "Arrêter « {} » ?",
    leave_button: "Me désabonner de « {} »",
    left_title: "Vous êtes désabonné de « {} »",
    saved_title: "Vos préférences sont enregistrées",
    now_receive: "Vous recevrez désormais : {}",
    no_longer: "Vous ne recevrez plus : {}",
    nothing_changed: "Rien n’a changé.",
    welcome_back: "Bon retour parmi nous.",
    all_title: "Vous êtes désabonné de tous les e-mails",
    all_body: "Vous ne recevrez plus d’e-mails de notre part. Vous pouvez revenir à tout moment depuis vos préférences e-mail.",
    back: "Retour à vos préférences e-mail",
    invalid_title: "Ce lien ne fonctionne pas",
    invalid_body: "Ce lien n’est pas valide ou a expiré. Utilisez le lien du dernier e-mail que vous avez reçu de notre part, tel quel.",
    gone_title: "Nous n’avons pas trouvé votre abonnement",
    gone_body: "Il n’existe plus d’abonnement pour ce lien : vous ne recevrez aucun e-mail de notre part. Vous n’avez rien d’autre à faire.",
    bad_form_title: "Rien n’a été modifié",
    bad_form_body: "Le formulaire a envoyé quelque chose que nous ne connaissons pas ({}). Ouvrez à nouveau le lien de votre e-mail et utilisez le formulaire qui s’y trouve.",
    busy_title: "Veuillez réessayer",
    busy_body: "Nous n’avons pas pu enregistrer votre choix. Rien n’a été modifié. Veuillez réessayer dans une minute.",
    not_allowed_title: "Non autorisé",
    not_allowed_body: "Ouvrez le lien de votre e-mail dans un navigateur.",
};

pub fn words(language: &str) -> &'static Words {
    match language {
        "de" => &DE,
        "fr" => &FR,
        _ => &EN,
    }
}

/// `template` with its `{}` replaced by `value`.
pub fn fill(template: &str, value: &str) -> String {
    template.replacen("{}", value, 1)
}

pub fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&#39;")
}

/// Contrast: text #1f2933 and buttons #1f2933 on white, hints #3e4c59 (all above 7:1); a
/// visible focus ring; checkboxes and buttons at least 44 px tall to tap.
const STYLE: &str = "*{box-sizing:border-box}body{font-family:-apple-system,Segoe UI,Roboto,Helvetica,Arial,sans-serif;font-size:16px;line-height:1.5;background:#f4f5f7;color:#1f2933;margin:0;padding:16px}main{max-width:560px;margin:32px auto;background:#fff;border-radius:8px;padding:24px}h1{font-size:24px;line-height:1.25;margin:0 0 12px}h2{font-size:18px;margin:0 0 8px}p{margin:0 0 16px}fieldset{border:0;margin:0 0 16px;padding:0}legend{font-weight:600;margin-bottom:8px;padding:0}.topic{display:flex;align-items:center;gap:12px;min-height:44px;padding:6px 0;border-bottom:1px solid #e4e7eb}.topic input{width:22px;height:22px;margin:0;flex:none;accent-color:#1f2933}.topic label{flex:1;cursor:pointer}button{font:inherit;min-height:44px;padding:10px 20px;border:2px solid #1f2933;border-radius:6px;background:#1f2933;color:#fff;cursor:pointer}button.secondary{background:#fff;color:#1f2933}:focus-visible{outline:3px solid #1d4ed8;outline-offset:2px}section{margin-top:24px;padding-top:16px;border-top:1px solid #e4e7eb}.note{background:#fff8e1;border-left:4px solid #b7791f;padding:8px 12px}.hint{color:#3e4c59;font-size:14px}ul{padding-left:20px}a{color:#1d4ed8}";

/// A page: `status`, a title (the `<h1>` too) and already-escaped HTML after it.
pub fn page(status: u16, language: &str, title: &str, body_html: &str) -> HttpResponse {
    let body = format!(
        "<!doctype html><html lang=\"{language}\"><head><meta charset=\"utf-8\"><meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><meta name=\"robots\" content=\"noindex\"><title>{title}</title><style>{STYLE}</style></head><body><main><h1>{title}</h1>{body_html}</main></body></html>",
        title = escape(title),
    );
    let mut headers = vec![
        ("content-type", "text/html; charset=utf-8".to_owned()),
        // The token is in the URL: keep it out of caches and referrers.
        ("cache-control", "no-store".to_owned()),
        ("referrer-policy", "no-referrer".to_owned()),
        ("x-content-type-options", "nosniff".to_owned()),
        (
            "content-security-policy",
            "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
                .to_owned(),
        ),
    ];
    if status == 405 {
        headers.push(("allow", "GET, POST".to_owned()));
    }
    if status == 503 {
        headers.push(("retry-after", "60".to_owned()));
    }
    HttpResponse {
        status,
        headers,
        body: body.into_bytes(),
    }
}

/// A page that only says something: a title and one paragraph.
pub fn message(status: u16, language: &str, title: &str, text: &str) -> HttpResponse {
    page(status, language, title, &format!("<p>{}</p>", escape(text)))
}

/// The form's action: the same URL with the token (a relative URL keeps the path).
fn action(token: &str) -> String {
    format!("?token={}", escape(token))
}

/// What the preference centre shows.
pub struct Centre<'a> {
    pub language: &'static str,
    pub token: &'a str,
    pub topics: &'a Topics,
    /// Whether they receive each topic now, in the topics' order.
    pub receives: Vec<bool>,
    pub out_of_everything: bool,
    /// The email's topic, when they came to leave it (`&leave=1`).
    pub leaving: Option<&'a Topic>,
}

/// The preference centre: every topic with its state, save, and "unsubscribe from all".
pub fn centre(c: &Centre<'_>) -> HttpResponse {
    let w = words(c.language);
    let action = action(c.token);
    let mut html = format!("<p>{}</p>", escape(w.intro));
    if let Some(topic) = c.leaving {
        let label = topic.label(c.language);
        html.push_str(&format!(
            "<section aria-labelledby=\"leave-heading\" style=\"margin-top:0;padding-top:0;border-top:0\"><h2 id=\"leave-heading\">{}</h2><form method=\"post\" action=\"{action}\"><input type=\"hidden\" name=\"action\" value=\"leave\"><button type=\"submit\">{}</button></form></section><section>",
            escape(&fill(w.leave_question, label)),
            escape(&fill(w.leave_button, label)),
        ));
    }
    if c.out_of_everything {
        html.push_str(&format!("<p class=\"note\">{}</p>", escape(w.out_note)));
    }
    html.push_str(&format!(
        "<form method=\"post\" action=\"{action}\"><input type=\"hidden\" name=\"action\" value=\"save\"><fieldset><legend>{}</legend>",
        escape(w.legend)
    ));
    for (topic, on) in c.topics.all().iter().zip(&c.receives) {
        let id = escape(topic.id.as_str());
        html.push_str(&format!(
            "<div class=\"topic\"><input type=\"checkbox\" id=\"topic-{id}\" name=\"topic\" value=\"{id}\"{}><label for=\"topic-{id}\">{}</label></div>",
            if *on { " checked" } else { "" },
            escape(topic.label(c.language)),
        ));
    }
    html.push_str(&format!(
        "</fieldset><button type=\"submit\">{}</button></form>",
        escape(w.save)
    ));
    if c.leaving.is_some() {
        html.push_str("</section>");
    }
    html.push_str(&format!(
        "<section aria-labelledby=\"all-heading\"><h2 id=\"all-heading\">{}</h2><p class=\"hint\" id=\"all-hint\">{}</p><form method=\"post\" action=\"{action}\"><input type=\"hidden\" name=\"action\" value=\"unsubscribe-all\"><button type=\"submit\" class=\"secondary\" aria-describedby=\"all-hint\">{}</button></form></section>",
        escape(w.all_heading),
        escape(w.all_hint),
        escape(w.all_button),
    ));
    page(200, c.language, w.title, &html)
}

/// A confirmation: what changed, in sentences, and the way back to the centre.
pub fn confirmation(
    language: &'static str,
    token: &str,
    title: &str,
    lines: &[String],
) -> HttpResponse {
    let w = words(language);
    let mut html = String::from("<div role=\"status\">");
    for line in lines {
        html.push_str(&format!("<p>{}</p>", escape(line)));
    }
    html.push_str(&format!(
        "</div><p><a href=\"{}\">{}</a></p>",
        action(token),
        escape(w.back)
    ));
    page(200, language, title, &html)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_language_of_ours_from_a_locale_or_a_header() {
        assert_eq!(language("de-AT"), "de");
        assert_eq!(language("fr_CA"), "fr");
        assert_eq!(language("es-ES,fr;q=0.8,en;q=0.5"), "fr");
        assert_eq!(language("pt-BR"), "en");
        assert_eq!(language(""), "en");
    }

    #[test]
    fn the_highest_q_value_wins() {
        assert_eq!(language("fr;q=0.1, de;q=0.9"), "de");
        assert_eq!(language("en;q=0.5,fr;q=0.8"), "fr");
        // No q is q=1; spacing and the parameter's case do not matter.
        assert_eq!(language("de;q=0.999, fr"), "fr");
        assert_eq!(language("de ; Q = 0.7 , fr;q=0.6"), "de");
        // A range not ours weighs nothing, whatever its q.
        assert_eq!(language("es;q=1, de;q=0.2"), "de");
        // `*` is each of ours the header does not name: here English (first of ours).
        assert_eq!(language("*;q=0.9, fr;q=0.1"), "en");
        assert_eq!(language("fr;q=0.1, *;q=1"), "en");
        assert_eq!(language("en;q=0, fr;q=0.1, *;q=0.5"), "de");
        assert_eq!(language("de, *;q=0.5"), "de");
        assert_eq!(language("*"), "en");
    }

    #[test]
    fn equal_q_values_keep_the_header_order() {
        assert_eq!(language("fr;q=0.5, de;q=0.5"), "fr");
        assert_eq!(language("de, fr"), "de");
        assert_eq!(language("fr;q=1.000, de"), "fr");
    }

    #[test]
    fn q_zero_is_not_acceptable() {
        assert_eq!(language("fr;q=0, de;q=0.1"), "de");
        assert_eq!(language("de;q=0.000"), "en");
        assert_eq!(language("fr;q=0,de;q=0"), "en");
    }

    #[test]
    fn a_malformed_q_is_ignored_safely() {
        // As if absent: weight 1, never a panic, never a lost range.
        for q in [
            "", "abc", "1.5", "2", "-1", "0.1234", "0.", ".5", "NaN", "1e-3", "0,5",
        ] {
            let header = format!("fr;q={q}, de;q=0.9");
            let _ = language(&header);
        }
        assert_eq!(language("fr;q=high, de;q=0.9"), "fr");
        assert_eq!(language("fr;q=1.5, de;q=0.9"), "fr");
        assert_eq!(language("de;q=0.9, fr;q="), "fr");
        assert_eq!(language("fr;q;x=1, de;q=0.5"), "fr");
        assert_eq!(language(";;,,=;q=, de;q=0.3"), "de");
        assert_eq!(language("fr;q=0.\u{e9}, de"), "fr");
    }

    #[test]
    fn every_language_fills_every_sentence() {
        for l in LANGUAGES {
            let w = words(l);
            for template in [
                w.leave_question,
                w.leave_button,
                w.left_title,
                w.now_receive,
                w.no_longer,
                w.bad_form_body,
            ] {
                assert!(template.contains("{}"), "{l}: {template}");
            }
        }
        assert_eq!(words("de").title, "E-Mail-Einstellungen");
    }

    #[test]
    fn pages_escape_and_protect_the_token() {
        let page = message(200, "en", "T<", "M&");
        assert!(page.text().contains("<title>T&lt;</title>") && page.text().contains("M&amp;"));
        let topics = Topics::builtin();
        let centre = centre(&Centre {
            language: "en",
            token: "a\"b",
            topics,
            receives: vec![true, false, false],
            out_of_everything: false,
            leaving: None,
        });
        assert!(centre.text().contains("action=\"?token=a&quot;b\""));
        let response = centre.to_function_url_response();
        assert_eq!(response["statusCode"], 200);
        assert_eq!(response["headers"]["cache-control"], "no-store");
        assert_eq!(response["headers"]["referrer-policy"], "no-referrer");
        assert!(response["headers"]["content-security-policy"]
            .as_str()
            .unwrap()
            .contains("frame-ancestors 'none'"));
        // Every checkbox has its label.
        for topic in topics.all() {
            assert!(centre
                .text()
                .contains(&format!("<label for=\"topic-{}\">", topic.id)));
        }
    }
}
