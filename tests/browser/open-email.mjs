// Opens a sent email's HTML in headless Chromium the way a person's mail client shows it,
// driven by playwright-core (infra/browser.sh installs both). Two passes:
//   images on:  every pick card and badge loads, the first pick is clicked after the click
//               grace and lands on its page through the counted redirect;
//   images off: the email still reads (the heading, the alt texts).
// Prints one JSON line with what it saw; screenshots go to --shots. Usage:
//   node open-email.mjs --html FILE --shots DIR --grace-ms N
import { chromium } from "playwright-core";
import { pathToFileURL } from "node:url";

const args = Object.fromEntries(
  process.argv.slice(2).reduce((pairs, arg, i, all) => {
    if (arg.startsWith("--")) pairs.push([arg.slice(2), all[i + 1]]);
    return pairs;
  }, []),
);
const html = pathToFileURL(args.html).href;
const shots = args.shots;
const graceMs = Number(args["grace-ms"] ?? 0);

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
// A person's desktop browser, not a headless one (OpenContent counts headless clients'
// clicks as a scanner's).
const userAgent =
  "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/156.0 Safari/537.36";
const report = {};
try {
  // Images on: a desktop window.
  const on = await browser.newContext({ userAgent, viewport: { width: 800, height: 900 } });
  const responses = [];
  on.on("response", (r) =>
    responses.push({ url: r.url(), status: r.status(), location: r.headers()["location"] }),
  );
  const page = await on.newPage();
  await page.goto(html, { waitUntil: "load" });
  await page.waitForFunction(() => [...document.images].every((i) => i.complete), null, { timeout: 20000 });
  report.images = await page.$$eval("img", (imgs) =>
    imgs.map((i) => ({ src: i.getAttribute("src"), alt: i.getAttribute("alt"), width: i.naturalWidth, height: i.naturalHeight })),
  );
  await page.screenshot({ path: `${shots}/open-time-email.png`, fullPage: true });
  // Past the grace after the first open froze the picks, a person clicks the first pick.
  await page.waitForTimeout(graceMs + 500);
  const first = page.locator('a[href*="/go?t="]').first();
  report.clicked = await first.getAttribute("href");
  // Email links open in a new tab (MJML's target="_blank").
  const [tab] = await Promise.all([on.waitForEvent("page", { timeout: 20000 }), first.click()]);
  await tab.waitForLoadState("load");
  report.landed = tab.url();
  report.landedText = await tab.textContent("h1");
  report.redirects = responses.filter((r) => r.status === 307).map((r) => r.url);
  // Reopened after the click: the badges are decided again (the clicked pick is now the
  // campaign's most clicked).
  responses.length = 0;
  await page.reload({ waitUntil: "load" });
  await page.waitForFunction(() => [...document.images].every((i) => i.complete), null, { timeout: 20000 });
  const badgeUrls = await page.$$eval('img[src*="/badge?t="]', (imgs) => imgs.map((i) => i.src));
  report.badgesAfterClick = badgeUrls.map((u) => responses.find((r) => r.url === u)?.location ?? null);
  await page.screenshot({ path: `${shots}/open-time-email-after-click.png`, fullPage: true });
  await on.close();

  // Images off, as Outlook shows an email by default.
  const context = await browser.newContext({ userAgent, viewport: { width: 800, height: 900 } });
  await context.route("**/*", (route) =>
    route.request().resourceType() === "image" ? route.abort() : route.continue(),
  );
  const off = await context.newPage();
  await off.goto(html, { waitUntil: "load" });
  report.imagesOff = {
    text: await off.evaluate(() => document.body.innerText),
    alts: await off.$$eval("img", (imgs) => imgs.map((i) => i.getAttribute("alt"))),
    loaded: await off.$$eval("img", (imgs) => imgs.filter((i) => i.naturalWidth > 0).length),
  };
  await off.screenshot({ path: `${shots}/open-time-email-images-off.png`, fullPage: true });
  await context.close();
} finally {
  await browser.close();
}
console.log(JSON.stringify(report));
