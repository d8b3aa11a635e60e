// The preference centre in headless Chromium, driven by playwright-core (infra/browser.sh
// installs both), with JavaScript off (the page must not need it):
//   desktop: open the sent email, follow its "manage all emails" link, read every topic and
//            its state, walk the page with Tab (the focus order), tick --toggle with the
//            space bar, Tab to the save button, press Enter, read the confirmation;
//   tampered: the same link with its token altered;
//   phone:   a 390x844 touch screen: nothing wider than the screen, tap targets' heights.
// Colour contrast of the text and buttons is measured on the page as rendered.
// Prints one JSON line with what it saw; screenshots go to --shots. Usage:
//   node preferences.mjs --html FILE --manage-text TEXT --toggle TOPIC_ID --shots DIR
import { chromium } from "playwright-core";
import { pathToFileURL } from "node:url";

const args = Object.fromEntries(
  process.argv.slice(2).reduce((pairs, arg, i, all) => {
    if (arg.startsWith("--")) pairs.push([arg.slice(2), all[i + 1]]);
    return pairs;
  }, []),
);
const shots = args.shots;

const browser = await chromium.launch({
  executablePath: process.env.MAILFLOW_CHROMIUM || "/usr/bin/chromium",
  args: [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
  ],
});

// What the page shows, read through the DOM (playwright's own world, so it works with the
// page's JavaScript off).
async function read(page) {
  return page.evaluate(() => {
    // WCAG relative luminance and contrast ratio.
    const rgb = (c) => c.match(/\d+(\.\d+)?/g).slice(0, 3).map(Number);
    const lum = ([r, g, b]) => {
      const f = (v) => ((v /= 255) <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4);
      return 0.2126 * f(r) + 0.7152 * f(g) + 0.0722 * f(b);
    };
    const background = (el) => {
      for (let e = el; e; e = e.parentElement) {
        const bg = getComputedStyle(e).backgroundColor;
        if (!bg.startsWith("rgba(0, 0, 0, 0)") && bg !== "transparent") return bg;
      }
      return "rgb(255, 255, 255)";
    };
    const contrast = (el) => {
      const [a, b] = [lum(rgb(getComputedStyle(el).color)), lum(rgb(background(el)))];
      return (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
    };
    const texts = [...document.querySelectorAll("h1, h2, p, label, legend, button, a")];
    return {
      lang: document.documentElement.lang,
      title: document.title,
      h1: document.querySelector("h1")?.textContent ?? null,
      text: document.body.innerText,
      topics: [...document.querySelectorAll('input[type="checkbox"]')].map((i) => ({
        id: i.value,
        checked: i.checked,
        label: [...i.labels].map((l) => l.textContent).join(" "),
      })),
      buttons: [...document.querySelectorAll("button")].map((b) => b.textContent),
      minContrast: Math.min(...texts.map(contrast)),
      scripts: document.scripts.length,
      overflow: document.documentElement.scrollWidth - window.innerWidth,
      tapHeights: [...document.querySelectorAll("button, .topic")].map((e) => e.getBoundingClientRect().height),
    };
  });
}

// The focused element, described: a checkbox by its value, a button by its text.
const focused = (page) =>
  page.evaluate(() => {
    const e = document.activeElement;
    if (!e || e === document.body) return null;
    return e.type === "checkbox" ? `checkbox:${e.value}` : `${e.tagName.toLowerCase()}:${e.textContent}`;
  });

const report = {};
try {
  const desktop = await browser.newContext({ javaScriptEnabled: false, viewport: { width: 900, height: 1000 } });
  // Generous: on two shared cores, beside the other tests, a page can take many seconds.
  desktop.setDefaultTimeout(120000);
  const page = await desktop.newPage();
  await page.goto(pathToFileURL(args.html).href, { waitUntil: "load" });
  // The email's own link, clicked as a reader would.
  const manage = page.getByRole("link", { name: args["manage-text"] });
  report.manageHref = await manage.getAttribute("href");
  await Promise.all([page.waitForNavigation({ waitUntil: "load" }), manage.click()]);
  report.centreUrl = page.url();
  report.centre = await read(page);
  await page.screenshot({ path: `${shots}/preference-centre.png`, fullPage: true });
  // The keyboard: Tab through everything once, in order.
  report.focusOrder = [];
  for (let i = 0; i < 8; i++) {
    await page.keyboard.press("Tab");
    const now = await focused(page);
    if (now === null || report.focusOrder.includes(now)) break;
    report.focusOrder.push(now);
  }
  // Back to the top, then to the topic to change, tick it with the space bar, Tab to save.
  await page.goto(report.centreUrl, { waitUntil: "load" });
  const target = `checkbox:${args.toggle}`;
  for (let i = 0; i < 8 && (await focused(page)) !== target; i++) await page.keyboard.press("Tab");
  report.toggledFocused = (await focused(page)) === target;
  await page.keyboard.press("Space");
  for (let i = 0; i < 8 && !String(await focused(page)).startsWith("button:"); i++) await page.keyboard.press("Tab");
  report.saveFocused = await focused(page);
  await Promise.all([page.waitForNavigation({ waitUntil: "load" }), page.keyboard.press("Enter")]);
  report.saved = await read(page);
  await page.screenshot({ path: `${shots}/preference-centre-saved.png`, fullPage: true });
  // Back to the centre: the change shows.
  await page.getByRole("link").first().click();
  await page.waitForLoadState("load");
  report.after = await read(page);

  // The same link with its token altered.
  const url = new URL(report.centreUrl);
  const token = url.searchParams.get("token");
  // One character inside the signature (the last one may only carry padding bits, and a
  // change there can make the token not base64 at all: a 400, not the 403 of a bad signature).
  const at = token.length - 10;
  const swapped = token[at] === "A" ? "B" : "A";
  url.searchParams.set("token", token.slice(0, at) + swapped + token.slice(at + 1));
  const tampered = await page.goto(url.href, { waitUntil: "load" });
  report.tampered = { status: tampered.status(), ...(await read(page)) };
  await page.screenshot({ path: `${shots}/preference-centre-tampered.png`, fullPage: true });
  await desktop.close();

  // A phone.
  const phone = await browser.newContext({
    javaScriptEnabled: false,
    viewport: { width: 390, height: 844 },
    deviceScaleFactor: 2,
    isMobile: true,
    hasTouch: true,
  });
  phone.setDefaultTimeout(120000);
  const small = await phone.newPage();
  await small.goto(report.centreUrl, { waitUntil: "load" });
  report.phone = await read(small);
  await small.screenshot({ path: `${shots}/preference-centre-phone.png`, fullPage: true });
  await phone.close();
} finally {
  await browser.close();
}
console.log(JSON.stringify(report));
