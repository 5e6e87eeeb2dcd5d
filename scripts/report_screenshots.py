"""Screenshots of the report (issue 28) as a reviewer first sees it, in headless Chromium at 1400 px wide: the index
page, and notebook 04's token-heatmap section (the page from that section's heading on).

    python scripts/report_screenshots.py [--report report] [--output docs/screenshots]

Reads the site `make report` wrote; writes report_index.png and 04_token_heatmaps.png. Offline, seconds.
"""
import argparse
import shutil
import subprocess
from pathlib import Path

# Hides every cell before the one whose heading starts with the given text, so the screenshot starts there.
FROM_HEADING = """<script>
window.addEventListener("load", () => {
  const cells = [...document.querySelectorAll(".jp-Cell")];
  const at = cells.findIndex(c => [...c.querySelectorAll("h1, h2, h3")].some(h => h.textContent.startsWith(%r)));
  if (at < 0) { document.body.innerHTML = "<h1>heading not found: " + %r + "</h1>"; return; }
  cells.slice(0, at).forEach(c => c.style.display = "none");
  window.scrollTo(0, 0);
});
</script>"""


def shot(page: Path, out: Path, height: int, heading: str | None = None) -> None:
    browser = shutil.which("chromium-headless-shell") or shutil.which("chromium")
    if browser is None:
        raise SystemExit("no headless Chromium: `make chromium` installs Debian's (as root)")
    probe = page.with_name(f".shot-{page.name}")
    text = page.read_text(encoding="utf-8")
    if heading:
        text = text.replace("</body>", FROM_HEADING % (heading, heading) + "</body>")
    probe.write_text(text, encoding="utf-8")
    try:
        subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                        f"--window-size=1400,{height}", "--virtual-time-budget=10000",
                        f"--screenshot={out.resolve()}", probe.resolve().as_uri()], check=True, capture_output=True, timeout=300)
    finally:
        probe.unlink()
    print(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--report", type=Path, default=Path("report"), help="the site make report wrote (default: report)")
    ap.add_argument("--output", type=Path, default=Path("docs/screenshots"), help="where the PNGs go")
    args = ap.parse_args()
    args.output.mkdir(parents=True, exist_ok=True)
    shot(args.report / "index.html", args.output / "report_index.png", 1600)
    page = next(args.report.glob("04_*.html"))
    shot(page, args.output / "04_token_heatmaps.png", 1800, "Token heatmaps")


if __name__ == "__main__":
    main()
