"""`ifcore report` (`make report`): the executed notebooks as an HTML site a reviewer reads offline.

One page per notebook (nbconvert's lab template, titled by the notebook's heading, a link back to the index on top,
code folded behind a "show code" switch (the parameters cell stays shown), images embedded, no script or style
fetched from the network, widget outputs replaced by their text, no mid-word breaks, wide tables and long code cells
scrolled inside their own box) and an index
with one card per stage: its primary result where it has one (the registered question and its computed verdict,
also recorded in the rendering's metadata `ifcore.primary`), its question (the notebook's title and first
paragraph), its first figure, the
conclusions its run decided (the lines of its closing cell that state a decided sign), and how long it ran.
"""
from __future__ import annotations

import copy
import html
import math
import re
from pathlib import Path

from markdown_it import MarkdownIt

# Decided signs, as ifcore.viz.decide and ifcore.bench.cot_study write them; "cannot decide" lines are left out.
DECIDED = re.compile(r": (positive|negative)\.$|\b(helps|hurts)\b(?! on)|\bBEATS\b")
CSS = """<style>
/* a reviewer's page: no mid-word breaks (nbconvert's pre breaks anywhere), nothing wider than the page */
pre, .jp-OutputArea-output pre { word-break: normal !important; overflow-wrap: anywhere; white-space: pre-wrap; }
.jp-OutputArea-output table, .jp-RenderedHTMLCommon table { display: block; overflow-x: auto; max-width: 100%; }
img { max-width: 100%; height: auto; }
/* results first: a long code cell scrolls inside its own box (all of it there) instead of pushing them down */
.jp-CodeCell:not(.celltag_parameters) .jp-InputArea-editor > .cm-editor { max-height: 10.5em; overflow-y: auto; }
/* code folded until "show code" is ticked (a checkbox: no script); the parameters say what this run was */
#show-code:not(:checked) ~ .jp-CodeCell:not(.celltag_parameters):not(.celltag_injected-parameters) .jp-Cell-inputWrapper
  { display: none; }
.ifcore-nav { position: sticky; top: 0; z-index: 10; background: #f6f8fa; border-bottom: 1px solid #ddd;
  padding: 0.4em 1em; font-family: system-ui, sans-serif; }
.ifcore-switch { font-family: system-ui, sans-serif; margin: 0.5em 0 0.5em 1em; display: inline-block; }
</style>"""


def _title(nb) -> str:
    """The notebook's title: its first Markdown cell's first line, the heading marks dropped."""
    intro = next((c["source"] for c in nb["cells"] if c["cell_type"] == "markdown"), "")
    return intro.partition("\n")[0].lstrip("# ").strip() or "notebook"


def _page(nb) -> str:
    """One executed notebook as a self-contained HTML page."""
    from nbconvert import HTMLExporter

    nb = copy.deepcopy(nb)  # widget outputs are rewritten below
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            data.pop("application/vnd.jupyter.widget-view+json", None)  # an empty box without its JS
    nb.metadata.pop("widgets", None)
    exporter = HTMLExporter(template_name="lab", embed_images=True)
    body, _ = exporter.from_notebook_node(nb)
    body = re.sub(r"<script[^>]*\bsrc=\"https?://[^\"]*\"[^>]*>\s*</script>", "", body)  # offline: no CDN scripts
    body = re.sub(r"<link[^>]*\bhref=\"https?://[^\"]*\"[^>]*>", "", body)
    title = html.escape(_title(nb))
    body = re.sub(r"<title>.*?</title>", lambda _: f"<title>{title}</title>", body, count=1, flags=re.S)
    body = body.replace("<main>", f'<nav class="ifcore-nav"><a href="index.html">&larr; all notebooks</a> &middot; '
                                  f'{title}</nav>\n<main>\n<input type="checkbox" id="show-code">'
                                  f'<label class="ifcore-switch" for="show-code">show code</label>', 1)
    return body.replace("</head>", CSS + "\n</head>", 1)


PRIMARY_MIME = "application/vnd.ifcore.primary+json"  # ifcore.viz.show_primary's output (viz imports matplotlib)


def primary(nb) -> dict | None:
    """The notebook's primary result (ifcore.stats.primary_result): its metadata `ifcore.primary`, else the output
    ifcore.viz.show_primary displayed; None when it has neither."""
    found = nb.get("metadata", {}).get("ifcore", {}).get("primary")
    return found or next((o["data"][PRIMARY_MIME] for c in nb["cells"] if c["cell_type"] == "code"
                          for o in c.get("outputs", []) if PRIMARY_MIME in o.get("data", {})), None)


def primary_markdown(result: dict) -> str:
    """The primary result (stats.primary_result) as a reader's paragraph: the question, the design and its power,
    the estimate with both intervals, and the three-valued verdict, each number from `result`."""
    from ifcore import stats

    r = {k: math.nan if v is None else v for k, v in result.items()}  # None: a number one seed cannot give
    pct = f"{100 * (1 - r['alpha']):g}%"
    verdict = {stats.FOUND: f"**effect found ({r['direction']})**",
               stats.EQUIVALENT: f"**no effect as large as {r['sesoi']:g}** (TOST)" + (
                   f"; the {pct} interval excludes 0 too: an effect ({r['direction']}) smaller than the smallest of "
                   "interest" if r["below_sesoi"] else ""),
               stats.UNDECIDED: "**undecided**: neither an effect nor its absence at this size is shown"}[r["verdict"]]
    planned = (f"{r['planned_seeds']} seeds give power {r['power']:g} to decide it at the pilot's sd "
               f"({r['pilot']['sd']:.4g}, {r['pilot']['source']})")
    halfway = r.get("power_halfway")  # renderings before 2026-12-07's evening lack it
    ran = (f"this run has {r['seeds']} seeds (power {r['power_found']:.2f} to find {r['sesoi']:g}, "
           f"{r['power_equivalence']:.2f} to exclude it"
           + (f" at 0 and {halfway:.2f} at {r['sesoi'] / 2:g}" if isinstance(halfway, float) else "")
           + (": fewer than planned, a preset smaller than the full one)" if r["seeds"] < r["planned_seeds"] else ")"))
    return (f"**Primary question** (registered before the run): {r['question']}  \n"
            f"Endpoint: {r['endpoint']}; comparison: {r['comparison']}; smallest effect of interest "
            f"{r['sesoi']:g}; alpha {r['alpha']:g}. Design: {planned}; {ran}.  \n"
            f"Estimate {r['estimate']:+.4f}, {pct} t-interval {r['ci_lo']:+.4f} to {r['ci_hi']:+.4f} "
            f"(t-test p = {r['p']:.3g}); {100 * (1 - 2 * r['alpha']):g}% interval {r['tost_lo']:+.4f} to "
            f"{r['tost_hi']:+.4f} (TOST p = {r['p_tost']:.3g}); seed-to-seed sd of the difference {r['sd']:.4f}.  \n"
            f"Verdict: {verdict}.")


def verdict_line(r: dict) -> str:
    """The verdict in a few words, its direction where the 95% interval excludes 0 (for an equivalence verdict: an
    effect smaller than the smallest of interest)."""
    if not r.get("direction"):
        return r["verdict"]
    return r["verdict"] + (f" (an effect, {r['direction']}, smaller than it)" if r.get("below_sesoi")
                           else f" ({r['direction']})")


def _num(x) -> str:
    return "n/a" if x is None else f"{x:+.4f}"


def _primary_html(r: dict) -> str:
    """The card's lead: the registered question and its computed verdict, each number from the result."""
    pct = f"{100 * (1 - r['alpha']):g}%"
    return (f"<p class=\"primary\"><b>Primary question:</b> {html.escape(r['question'])}<br>"
            f"{html.escape(r['endpoint'])}; {html.escape(r['comparison'])}; smallest effect of interest "
            f"{r['sesoi']:g}; {r['seeds']} seeds (planned {r['planned_seeds']}).<br>"
            f"Estimate {_num(r['estimate'])} ({pct} CI {_num(r['ci_lo'])} to {_num(r['ci_hi'])}). "
            f"<b>Verdict: {html.escape(verdict_line(r))}</b>.</p>")


def card(nb, page: str) -> str:
    """The index card of one executed notebook, led by its primary result where it has one."""
    cells = nb["cells"]
    intro = next((c["source"] for c in cells if c["cell_type"] == "markdown"), "")
    rest = intro.partition("\n")[2]
    question = next((p.strip() for p in rest.split("\n\n") if p.strip()), "")
    figure = next((o["data"]["image/png"] for c in cells if c["cell_type"] == "code" for o in c.get("outputs", [])
                   if "image/png" in o.get("data", {})), None)
    code = [c for c in cells if c["cell_type"] == "code" and c.get("outputs")]
    closing = [line for o in (code[-1]["outputs"] if code else []) for line in o.get("text", "").splitlines()]
    decided = [line.strip() for line in closing if DECIDED.search(line.strip())]
    meta = nb.get("metadata", {}).get("papermill", {})
    seconds = meta.get("duration")
    ran = (f"ran {seconds / 60:.1f} minutes" if seconds and seconds >= 60 else
           f"ran {seconds:.0f} s" if seconds else "run time not recorded") + (
        f", ended {meta['end_time'][:16].replace('T', ' ')} UTC" if meta.get("end_time") else "")
    items = "".join(f"<li>{html.escape(line)}</li>" for line in decided[:6])
    more = f"<li>and {len(decided) - 6} more</li>" if len(decided) > 6 else ""
    conclusions = (f"<p><b>Decided by this run</b> ({len(decided)}):</p><ul>{items}{more}</ul>" if decided else
                   "<p><b>Decided by this run:</b> nothing; every comparison's interval includes 0 at this run's "
                   "size, or the notebook measures rather than compares (see the page).</p>")
    image = f'<img alt="first figure" src="data:image/png;base64,{figure}">' if figure else "<p><i>no figure</i></p>"
    # The question is the notebook's own Markdown: rendered, its raw HTML escaped.
    question = MarkdownIt("commonmark", {"html": False}).renderInline(" ".join(question.split()))
    result = primary(nb)
    lead = _primary_html(result) if result else ""
    return (f'<section class="card"><h2><a href="{html.escape(page)}">{html.escape(_title(nb))}</a></h2>'
            f"{lead}<p>{question}</p>{image}{conclusions}"
            f'<p class="ran">{html.escape(ran)}</p></section>')


# What each stage cannot test at this scale, whatever its run finds: fixed by the design (docs/experiments.md).
LIMITS = {
    "01_cot_preliminary_study": "RAIF's finding is about 1.5B-8B models that can reason; SmolLM2-135M mostly cannot "
    "(the rendering shows how many of its CoT outputs even keep RAIF's format), so a difference here says what "
    "asking for reasoning does to this model's scores, not whether reasoning hurts instruction following.",
    "02_raif_superior_cot": "The policy's reasoning is a learned plan of half a million parameters, not prose; RAIF's "
    "premise (reasoning that pays, which the filter protects) can be tested only where reasoning pays at the warm "
    "start, which the notebook measures at step 0. DeepSeek-R1 experts, the paper's 7B-8B models and its benchmarks "
    "are out of reach.",
    "03_scopeif_graded_reward": "Synthetic ScopeInstruct-style instructions, a 0.5M-parameter policy and 40 GRPO "
    "steps with the exact verifier as the judge: not ScopeIF-Test, not Qwen3, not the tool-grounded LLM judge in the "
    "reward loop.",
    "04_rtt_token_rewards": "The relevance comes from the verifier's exact evidence (the oracle) or a discriminator "
    "trained on it, not from the paper's LLM annotator; the primary question tests the mechanism (token credit "
    "from correct relevance) on a 0.5M-parameter policy, not the paper's models or benchmarks.",
}
# Lines a rendering prints that the results page repeats besides the decided ones: measured premises.
MEASURED = re.compile(r"^(held-out RAIF reward with minus without reasoning at step 0|Reasoning (pays|is not shown))")
RESULTS_BEGIN = "<!-- results: generated by `make report` from papermill_runs/ (ifcore.report.results); do not edit -->"
RESULTS_END = "<!-- end results -->"


def _stream_lines(nb) -> list[str]:
    """Every printed line of a notebook read by nbformat (which joins a stream's text into one string)."""
    return [line.strip() for c in nb["cells"] if c["cell_type"] == "code" for o in c.get("outputs", [])
            for line in o.get("text", "").splitlines()]


def results(runs_dir: str | Path = "papermill_runs") -> tuple[str, str]:
    """(docs/results.md, the README's results block), generated from the executed notebooks 01-04 of RUNS_DIR:
    per stage its primary result (question, design, estimate, intervals, verdict), every comparison its run
    decided (the lines ifcore.viz.decide and ifcore.bench.cot_study write with a decided sign), the premises it
    measured, and what the stage cannot test at this scale (LIMITS). Each stage's part sits in a drift-checked
    block (tests/test_readme_drift.py)."""
    import nbformat

    notebooks = sorted(Path(runs_dir).glob("0[1-4]*.ipynb"))
    if not notebooks:
        raise ValueError(f"{runs_dir}: no executed stage notebook (01-04); run make reproduce first")
    rows, parts, total = [], [], 0.0
    for path in notebooks:
        nb = nbformat.read(path, as_version=4)
        meta = nb.metadata.get("papermill", {})
        seconds = meta.get("duration") or 0.0
        total += seconds
        lines = _stream_lines(nb)
        decided = list(dict.fromkeys(line for line in lines if DECIDED.search(line)))  # a family printed twice
        measured = [line for line in lines if MEASURED.search(line)]
        result = primary(nb)
        part = [f"## {_title(nb)}", "", f"<!-- numbers from {Path(runs_dir).name}/{path.name} -->",
                f"`{path.name}`, ended {(meta.get('end_time') or '')[:16].replace('T', ' ')} UTC, ran "
                f"{seconds / 60:.1f} minutes.", ""]
        if result:
            part += [primary_markdown(result), ""]
            verdict = verdict_line(result)
            ci = ("n/a" if result["ci_lo"] is None else
                  f"{result['estimate']:+.4f} ({result['ci_lo']:+.4f} to {result['ci_hi']:+.4f})")
            rows.append(f"| {path.stem[:2]} | {result['comparison']} | {result['sesoi']:g} | "
                        f"{result['seeds']} | {ci} | **{verdict}** |")
        part += [f"Measured: {line}" for line in measured] + ([""] if measured else [])
        family = f"each family corrected by Holm's method; {len(decided)}"
        part += ([f"Decided by this run besides the primary question (exploratory, {family}):" if result
                  else f"Decided by this run ({family}):", ""] + [f"- {line}" for line in decided] if decided else
                 ["Nothing besides the primary question is decided." if result else "Nothing is decided."])
        part += ["<!-- end numbers -->", "", f"**What this scale cannot test.** {LIMITS.get(path.stem, 'n/a')}", ""]
        parts.append("\n".join(part))
    table = ["| stage | primary comparison | smallest effect of interest | seeds | estimate (95% CI) | verdict |",
             "| --- | --- | --- | --- | --- | --- |", *rows]
    head = (f"The stage notebooks as one `make reproduce` rendered them ({total / 60:.1f} minutes of notebooks); "
            "each primary question was registered before the run, with seeds from a power analysis "
            "([docs/experiments.md](docs/experiments.md)). Everything each run decided, and what this scale cannot "
            "test: [docs/results.md](docs/results.md).")
    readme = "\n".join([RESULTS_BEGIN, head, "", *table, RESULTS_END])
    page = "\n".join(["# Results: what `make reproduce` decided", "",
                       "Generated by `make report` from the renderings in papermill_runs/ (`ifcore.report.results`); "
                       "do not edit: tests/test_report.py regenerates it from them. How a verdict is computed: "
                       "[experiments.md](experiments.md); the trainer and the methods: [training.md](training.md).",
                       "", *table, "", *parts])
    return page, readme


def write_results(runs_dir: str | Path, page: str | Path, readme: str | Path) -> None:
    """Write `results(runs_dir)`: the page to PAGE, the block into README between its RESULTS markers (kept
    where they are; a README without them is an error naming them)."""
    text, block = results(runs_dir)
    readme = Path(readme)
    old = readme.read_text(encoding="utf-8")
    if RESULTS_BEGIN not in old or RESULTS_END not in old:
        raise ValueError(f"{readme}: no results block ({RESULTS_BEGIN} ... {RESULTS_END}) to write into")
    before, rest = old.split(RESULTS_BEGIN, 1)
    readme.write_text(before + block + rest.split(RESULTS_END, 1)[1], encoding="utf-8")
    Path(page).write_text(text + "\n", encoding="utf-8")


def build(runs_dir: str | Path = "papermill_runs", out_dir: str | Path = "report") -> list[Path]:
    """Write OUT_DIR/index.html and one page per executed notebook of RUNS_DIR; returns the pages written, the
    index first. A rendering whose run displayed a primary result (ifcore.viz.show_primary) gets it recorded in its
    own metadata, `ifcore.primary`, where it is not yet: the machine-readable result beside the page.
    ValueError when RUNS_DIR holds no notebook."""
    import nbformat

    notebooks = sorted(Path(runs_dir).glob("*.ipynb"))
    if not notebooks:
        raise ValueError(f"{runs_dir}: no executed notebook (*.ipynb); run make reproduce first")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    pages, cards = [], []
    for path in notebooks:
        nb = nbformat.read(path, as_version=4)
        result = primary(nb)
        if result and nb.metadata.get("ifcore", {}).get("primary") != result:
            nb.metadata.setdefault("ifcore", {})["primary"] = result
            nbformat.write(nb, path)
        page = out / f"{path.stem}.html"
        page.write_text(_page(nb), encoding="utf-8")
        pages.append(page)
        cards.append(card(nb, page.name))
    index = out / "index.html"
    index.write_text(f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>ifcore: the executed notebooks</title>
<style>
body {{ font-family: system-ui, sans-serif; max-width: 1200px; margin: 2em auto; padding: 0 1em; color: #222; }}
.card {{ border: 1px solid #ccc; border-radius: 6px; padding: 0.5em 1.2em 1em; margin: 1.2em 0; }}
.card img {{ max-width: 100%; height: auto; border: 1px solid #eee; }}
.card li {{ margin: 0.3em 0; overflow-wrap: anywhere; }}
.ran {{ color: #666; font-size: 0.9em; }}
.primary {{ background: #f4f8fb; border-left: 4px solid #0072B2; padding: 0.4em 0.8em; }}
</style></head><body>
<h1>ifcore: the executed notebooks</h1>
<p>One card per paper stage: the question, the notebook's first figure, what its run decided (a sign counts as
decided only where its interval excludes 0 after the notebook's correction for multiple comparisons), and how long
it ran. Built by <code>make report</code> from <code>{html.escape(str(runs_dir))}</code>; readable offline.</p>
{"".join(cards)}
</body></html>
""", encoding="utf-8")
    return [index, *pages]
