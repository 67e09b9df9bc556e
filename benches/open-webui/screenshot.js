// Opens a chat Open WebUI stored (check.py's result) in headless Chromium, signed in with
// the check's token, and saves a screenshot of the answer with its sources.
// Usage: node screenshot.js OPEN_WEBUI_URL RESULT_JSON OUT_PNG
const { chromium } = require("playwright-core");
const fs = require("fs");

(async () => {
  const [base, resultPath, out] = process.argv.slice(2);
  const result = JSON.parse(fs.readFileSync(resultPath, "utf8"));
  const browser = await chromium.launch({
    executablePath: "/usr/bin/chromium",
    args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
      "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  await page.goto(base + "/auth");
  await page.evaluate((token) => localStorage.setItem("token", token), result.token);
  await page.goto(`${base}/c/${result.chat_id}`);
  // A first visit shows the release notes: close them.
  const welcome = page.getByRole("button", { name: /Let's Go/i });
  await welcome.waitFor({ timeout: 15000 }).then(() => welcome.click()).catch(() => {});
  // The answer, then the sources button under it, opened to list them.
  await page.getByText(result.answer.trim().split("\n")[0].slice(0, 40)).first().waitFor({ timeout: 60000 });
  const button = page.getByRole("button", { name: new RegExp(`${result.sources.length} Sources?`, "i") });
  await button.first().waitFor({ timeout: 30000 }).then(() => button.first().click()).catch(() => {});
  await page.waitForTimeout(1500);
  await page.screenshot({ path: out, fullPage: false });
  await browser.close();
})().catch((e) => {
  console.error(e);
  process.exit(1);
});
