// Opens a sent email's HTML in headless Chromium with images on, at a high-density screen's
// pixel ratio (the cards are drawn at twice their size for it), waits for every image and
// saves a screenshot. Prints one JSON line: each image's source, alt text, natural size and
// shown size. Usage: node open-cards.mjs --html FILE --shots DIR --shot NAME
import { chromium } from "playwright-core";
import { pathToFileURL } from "node:url";

const args = Object.fromEntries(
  process.argv.slice(2).reduce((pairs, arg, i, all) => {
    if (arg.startsWith("--")) pairs.push([arg.slice(2), all[i + 1]]);
    return pairs;
  }, []),
);
const browser = await chromium.launch({
  executablePath: process.env.MAILFLOW_CHROMIUM || "/usr/bin/chromium",
  args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync"],
});
// A person's desktop browser (OpenContent counts headless clients as scanners).
const userAgent =
  "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/156.0 Safari/537.36";
const report = {};
try {
  const context = await browser.newContext({
    userAgent,
    viewport: { width: 800, height: 900 },
    deviceScaleFactor: 2,
  });
  const page = await context.newPage();
  await page.goto(pathToFileURL(args.html).href, { waitUntil: "load" });
  await page.waitForFunction(() => [...document.images].every((i) => i.complete), null, { timeout: 20000 });
  report.images = await page.$$eval("img", (imgs) =>
    imgs.map((i) => ({
      src: i.getAttribute("src"),
      alt: i.getAttribute("alt"),
      width: i.naturalWidth,
      height: i.naturalHeight,
      shownWidth: i.width,
      shownHeight: i.height,
    })),
  );
  // The picks' section only (its heading, the cards, the badges), at the density they
  // were drawn for.
  const box = await page.$$eval('img[src*="/pick?t="], img[src*="/badge?t="]', (imgs) => {
    const r = imgs.map((i) => i.getBoundingClientRect());
    const left = Math.min(...r.map((b) => b.left));
    const top = Math.min(...r.map((b) => b.top));
    return {
      x: Math.max(0, left - 24),
      y: Math.max(0, top - 64),
      width: Math.max(...r.map((b) => b.right)) - left + 48,
      height: Math.max(...r.map((b) => b.bottom)) - top + 80,
    };
  });
  await page.screenshot({ path: `${args.shots}/${args.shot}.png`, clip: box, fullPage: true });
  await context.close();
} finally {
  await browser.close();
}
console.log(JSON.stringify(report));
