// Opens `mailctl report`'s HTML in headless Chromium: every plot drawn, nothing fetched from
// anywhere, the counts as the page shows them. Prints one JSON line; the screenshot goes to
// --shots, as NAME.png (default campaign-report). Usage: node report.mjs --html FILE --shots DIR
// [--name NAME]
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
  args: ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"],
});
const report = { requests: [] };
try {
  const context = await browser.newContext({ viewport: { width: 760, height: 900 } });
  const page = await context.newPage();
  const html = pathToFileURL(args.html).href;
  page.on("request", (r) => {
    if (r.url() !== html) report.requests.push(r.url());
  });
  await page.goto(html, { waitUntil: "load" });
  report.title = await page.textContent("h1");
  report.figures = await page.$$eval("figure", (figures) =>
    figures.map((f) => ({
      caption: f.querySelector("figcaption")?.textContent,
      width: f.querySelector("svg")?.getBoundingClientRect().width ?? 0,
      lines: f.querySelectorAll("polyline.series").length,
      bars: f.querySelectorAll("rect.bar").length,
    })),
  );
  report.counts = await page.$$eval("td[data-count]", (cells) =>
    Object.fromEntries(cells.map((c) => [c.dataset.count, Number(c.textContent)])),
  );
  const name = args.name ?? "campaign-report";
  await page.screenshot({ path: `${args.shots}/${name}.png`, fullPage: true });
} finally {
  await browser.close();
}
console.log(JSON.stringify(report));
