"""Over-refusal: the ``shell(command=...)`` templates people really write (SPEC §3).

:data:`CORPUS` holds commands of the kind found in projects' READMEs, Makefiles,
CI steps, Dockerfiles and deploy, backup and notification scripts, written with
placeholders where a workflow would put a step's output or a trigger field. It
is not chosen to pass: it is what people write. Templates that are genuinely
unsafe (a value that would run as code, or become an option that runs a
program: ``git clone {url}``, ``ssh host "… {x}"``, ``sed -i "s/x/{v}/"``,
``make deploy V={v}``) are left out, since refusing them is right.

The check may refuse at most a handful of them, each with advice. Every accepted
one that can run here is rendered as the runner renders it, with hostile values,
and run under ``dash -c`` and ``bash --posix -c``, with stubs for programs that
would reach the network or change the machine: the marker the values try to
create must never appear. Run with ``-s`` to see the report.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from brain.placeholders import Ref, refs, render
from brain.shell_check import render_command, shell_problem

SHELLS = {"dash": ["dash", "-c"], "bash --posix": ["bash", "--posix", "-c"]}
MAX_REFUSED = 5
ADVICE = ("write", "env=", "stdin=", "argv=", "feed", "--")

CORPUS: list[str] = [
    # --- notifications and logs ------------------------------------------------------------
    'echo "Deploying {version}…"',
    'echo "Deploy of {version} to {environment} finished in ${SECONDS}s"',
    "echo 'Payload: {trigger.body}'",
    'echo "Received {trigger.headers.x-github-event} for {trigger.path}"',
    'echo "Run finished at $(date) with status {status}"',
    'echo "[$(date -Iseconds)] {trigger.event} {trigger.path}" >> hooks.log',
    "curl -fsS -X POST -H 'Content-Type: application/json' -d {payload} "
    "https://hooks.slack.com/services/T000/B000/XXXX",
    'curl -sS -H "Authorization: Bearer $GITHUB_TOKEN" -H "Accept: application/vnd.github+json" '
    "-d {payload} https://api.github.com/repos/acme/web/issues/1/comments",
    'curl -fsS --data-urlencode "text={previous.report}" https://chat.example.com/hooks/abc',
    'curl -fsS -d "{\\"text\\": \\"{previous.report}\\"}" -H \'Content-Type: application/json\' '
    '"$SLACK_WEBHOOK_URL"',
    "jq -n --arg text {previous.report} '{text: $text}' | curl -fsS -H 'Content-Type: "
    "application/json' -d @- \"$SLACK_WEBHOOK_URL\"",
    "curl -fsS -m 10 --retry 3 https://hc-ping.com/{check_id}",
    "curl -s -o /dev/null -w '%{{http_code}}' {url}",
    'curl -fsS -H "X-Request-Id: {trigger.headers.x-request-id}" https://internal.example.com/ack',
    'curl -fsS -u "api:$MAILGUN_KEY" https://api.mailgun.net/v3/example.com/messages '
    "-F from=ops@example.com -F to={to} -F subject={subject} -F text={previous.report}",
    'notify-send "Build finished" {previous.report}',
    'notify-send "Build {trigger.headers.x-github-event}" "$(date): {build}"',
    'mail -s "{subject}" ops@example.com < report.txt',
    'echo {previous.report} | mail -s "Nightly report $(date +%F)" ops@example.com',
    "printf '%s\\n' {previous.report} | mail -s \"Backup {date} finished\" admin@example.com",
    "printf 'Subject: %s\\n\\n%s\\n' {subject} {body} | sendmail ops@example.com",
    'logger -t brain "deploy {version} started by {trigger.headers.x-github-event}"',
    'echo "::notice title=Deploy::{version} deployed"',
    'echo "version={version}" >> "$GITHUB_OUTPUT"',
    'echo "## Report" >> "$GITHUB_STEP_SUMMARY"; echo {previous.report} >> "$GITHUB_STEP_SUMMARY"',
    "printf '{\"text\": \"%s\"}' {previous.report} > message.json",
    "redis-cli PUBLISH deploys {trigger.body}",
    "redis-cli SET last_deploy {version}",
    "mosquitto_pub -h localhost -t alerts/{service} -m {previous.report}",
    "gh pr comment {pr} --body {previous.report}",
    "gh release create v{version} dist/app.tar.gz --notes {previous.changelog}",
    # --- webhooks: look at the payload -------------------------------------------------------
    "echo {trigger.body} | jq -r '.repository.full_name'",
    "printf '%s' {trigger.body} | jq -r '.pull_request.head.ref'",
    "jq -r '.ref' <<< {trigger.body}",
    "echo {trigger.body} > payload.json && jq . payload.json",
    "echo '{trigger.body}' > body.json",
    'echo "Branch: $(echo {trigger.body} | jq -r .ref)"',
    'echo "Payload size: $(printf %s {trigger.body} | wc -c) bytes"',
    "printf '%s' {trigger.body} | openssl dgst -sha256 -hmac \"$WEBHOOK_SECRET\"",
    'test "$(jq -r .action <<< {trigger.body})" = "opened" || exit 0',
    "test {trigger.headers.x-github-event} = push && echo deploying",
    '[ {trigger.headers.x-github-event} = "pull_request" ] || exit 0',
    'if [ "{trigger.headers.x-github-event}" = "push" ]; then ./deploy.sh; fi',
    "case {trigger.headers.x-github-event} in push) ./deploy.sh ;; ping) echo pong ;; "
    '*) echo "ignored" ;; esac',
    "COMMIT=$(echo {trigger.body} | jq -r .after) && echo \"$COMMIT\"",
    "echo {trigger.body} | base64 -d > upload.bin",
    "echo {trigger.body} | python3 scripts/handle_webhook.py",
    # --- git -------------------------------------------------------------------------------
    'git commit -am "Release {version}"',
    "git commit -m {msg}",
    'git commit -m "chore: bump to {version}" -m {previous.changelog}',
    'git tag -a v{version} -m "Release v{version}"',
    "git push origin v{version}",
    "git checkout -b release/{version}",
    "git checkout {branch}",
    "git log --oneline {previous.tag}..HEAD",
    "git archive --format=tar.gz -o app-{date}.tar.gz HEAD",
    # --- build and deploy --------------------------------------------------------------------
    "./scripts/deploy.sh {environment} {version}",
    "bash scripts/deploy.sh --env {environment} --tag {tag}",
    "set -euo pipefail; ./build.sh {target}",
    "cd releases/{version} && ./install.sh",
    "docker build -t registry.example.com/app:{tag} .",
    "docker build --build-arg VERSION={version} -t app:{version} .",
    "docker tag app:latest app:{version}",
    "docker push registry.example.com/app:{tag}",
    "docker compose up -d --no-deps {service}",
    "echo {secret} | docker login registry.example.com -u ci --password-stdin",
    "docker run --rm -e VERSION={version} app:{tag} ./migrate.sh",
    "kubectl set image deployment/web web=registry.example.com/web:{tag}",
    "kubectl rollout status deployment/{service} --timeout=120s",
    "helm upgrade --install web ./chart --set image.tag={tag}",
    'terraform apply -auto-approve -var "image_tag={tag}"',
    "yq -i '.image.tag = \"{tag}\"' values.yaml",
    "jq --arg v {version} '.version = $v' package.json > package.json.tmp && mv package.json.tmp "
    "package.json",
    "npm version {version} --no-git-tag-version",
    "npm publish --tag {dist_tag}",
    'npm test -- --grep "{pattern}"',
    "npx prettier --write {file}",
    'pip install --upgrade "mytool=={version}"',
    "python3 scripts/notify.py --channel ops --message {previous.report}",
    "python3 -m scripts.release {version}",
    "node scripts/post-comment.js {trigger.body}",
    "rsync -az --delete dist/ deploy@web1.example.com:/srv/app/releases/{version}/",
    "scp build/app.tar.gz deploy@{host}:/srv/releases/",
    "systemctl restart {service}",
    "sudo systemctl restart {service}",
    "timeout 30 ./healthcheck.sh {url}",
    "export RELEASE_TAG={tag}; ./scripts/release.sh",
    # --- backups -----------------------------------------------------------------------------
    "tar czf backup-{date}.tgz data/",
    "tar -czf backups/site-{date}.tar.gz -C data .",
    "nice -n 10 tar czf archive-{date}.tgz data",
    "pg_dump -Fc -f backups/{database}-{date}.dump {database}",
    "pg_dump {database} | gzip > backups/{database}-$(date +%F).sql.gz",
    "mysqldump --single-transaction {database} | gzip > backups/{database}.sql.gz",
    'psql "$DATABASE_URL" -v ON_ERROR_STOP=1 -v run_id={run_id} -f report.sql',
    "rsync -a --delete data/ backups/{date}/",
    "find backups -name '*.tgz' -mtime +{days} -delete",
    "aws s3 cp backups/db-{date}.dump s3://acme-backups/db/",
    "aws s3 sync dist/ s3://{bucket}/ --delete",
    "sha256sum backup-{date}.tgz > backup-{date}.tgz.sha256",
    "gpg --batch --yes -r ops@example.com -o backups/{date}.gpg -e backup.tgz",
    "zip -r site-{version}.zip public/",
    # --- files -------------------------------------------------------------------------------
    "mkdir -p releases/{version}",
    'mkdir -p "reports/{date}" && cp {previous.report} "reports/{date}/"',
    'cp dist/app.js "releases/{version}/app.js"',
    "mv {fetch} inbox/",
    "ln -sfn releases/{version} current",
    "rm -rf tmp/{job_id}",
    'touch "markers/{trigger.event}.done"',
    "echo {fetch} > data/latest.json",
    "echo {previous.report} >> reports/{date}.md",
    "echo {previous.report} | tee -a reports/weekly.md",
    "test -d releases/{version} || mkdir -p releases/{version}",
    "if [ -f {path} ]; then cat {path}; fi",
    'if [ -z "{previous.report}" ]; then echo "nothing to report"; exit 0; fi',
    '[ -n {previous.report} ] && echo {previous.report} | mail -s "Report" ops@example.com',
    'mktemp -d "build-{run_id}-XXXX"',
    "unzip -o {archive} -d extracted/",
    "du -sh {path}",
    "wc -l < {file}",
    "head -n 50 {previous.log}",
    "tail -n 100 logs/{service}.log",
    "diff -u {previous.snapshot} {snapshot} > changes.diff || true",
    "cmp -s {a} {b} || echo changed",
    "ls -1 {dir} | head -n 20",
    "basename {path} .tar.gz",
    # --- text --------------------------------------------------------------------------------
    "echo {fetch} | grep -c ERROR",
    "echo {fetch} | grep -i -- {pattern}",
    "grep -rn {pattern} src/",
    "grep -F {needle} access.log | tail -n 20",
    'grep -E "^{prefix}" inventory.txt',
    "grep -v -- {exclude} hosts.txt > hosts.filtered",
    "if grep -q {pattern} app.log; then echo found; else echo missing; fi",
    "echo {fetch} | tr '[:upper:]' '[:lower:]'",
    "printf '%s\\n' {previous.list} | sort -u > unique.txt",
    "cut -d, -f{column} data.csv",
    "awk '{print $1}' {file} | sort | uniq -c | sort -rn | head",
    "awk -F'\\t' 'NR>1 {sum += $3} END {print sum}' {previous.export}",
    "awk -v threshold={limit} '$3 > threshold' metrics.csv",
    "jq -r '.items[] | .name' {previous.fetch}",
    "jq -r --arg env {environment} '.[$env].url' config.json",
    "iconv -f latin1 -t utf-8 {file} > converted.txt",
    "printf 'Hello %s, your build %s finished\\n' {user} {build}",
    "printf '%s\\t%s\\n' \"$(date -u +%FT%TZ)\" {trigger.event} >> events.tsv",
    "date -d {when} +%s",
    "sleep {delay}",
    'while read -r line; do echo "{prefix} $line"; done < input.txt',
    'for f in reports/*.csv; do grep -H -- {pattern} "$f"; done',
    "echo {previous.urls} | xargs -n1 curl -fsSO",
    "python3 scripts/summarize.py < {previous.fetch}",
    "curl -fsSL {url} -o downloads/latest.json",
    "wget -q -O feed.xml {url}",
    'curl -fsS "https://api.example.com/items?since={previous.cursor}" | jq \'.items | length\'',
    "curl -fsS --retry 3 -F file=@{previous.artifact} https://uploads.example.com/",
]

#: The first hour's templates (issue 30): what a new user writes, each with no real way for
#: a value to become code (HTML and arrows inside quotes, ``uv run script.py``, ``npm run
#: build --``, wrappers written out...). Before the change 20 of these 80 were refused; at
#: most :data:`MAX_EVERYDAY_REFUSED` may be. The accepted ones run with hostile values below.
EVERYDAY: list[str] = [
    # --- messages: HTML, arrows and comparisons inside quotes
    'echo "<b>{name}</b>"',
    'echo "value={a}>limit"',
    'echo "<h1>Report for {date}</h1>" > report.html',
    "echo '<td>{cell}</td>' >> table.html",
    'echo "{name} <{email}>"',
    'echo "=> {result}"',
    'echo "a<{x}>b"',
    'echo "score {score}/100 (>= {min} passes)"',
    "printf '<li>%s</li>\\n' {item} >> list.html",
    'echo "Hello, {name}!"',
    'echo "{a},{b},{c}" >> data.csv',
    'echo "Build {build} finished: {status}" | tee -a build.log',
    'printf "%s\\n" "{line}" >> notes.txt',
    'echo "{json}" > data.json',
    # --- project runners
    "uv run script.py {x}",
    "uv run scripts/report.py --date {date}",
    "uv run --with requests fetch.py {url}",
    "uv run --python=3.12 tools/check.py {file}",
    "npm run build -- {x}",
    "npm run deploy -- --env {environment}",
    "npm run lint -- {file}",
    "npm start -- --port {port}",
    "deno run --allow-net server.ts {port}",
    "poetry run python scripts/sync.py {x}",
    "python3 manage.py migrate {app}",
    "python3 -m http.server {port}",
    "cargo run --release -- {x}",
    "ruby script.rb {x}",
    "perl script.pl {x}",
    "bash scripts/notify.sh \"{msg}\"",
    "sh -c 'echo \"$1\"' sh {x}",
    "./run.sh --name \"{name}\"",
    "python3 -c 'import sys; print(sys.argv[1].upper())' {x}",
    "echo {x} | python3 -c 'import sys; print(sys.stdin.read()[::-1])'",
    "curl -fsS {url} | python3 -m json.tool",
    "tini -s -- ./worker.sh {queue}",
    "env LANG=C ./tool {x}",
    "timeout 10 curl -fsS {url}",
    "nohup ./worker.sh {queue} > worker.log 2>&1 &",
    # --- files
    "cat {file} | wc -l",
    "wc -c < {file}",
    "ls -la {dir}",
    "mkdir -p out/{name} && touch out/{name}/ok",
    "cp {src} {dst}",
    'mv "{old}" "{new}"',
    "git log --author={author} --oneline",
    'echo "{x}" | base64',
    "echo -n {x} | sha256sum",
    "tar xzf {archive} -C out",
    'tar czf "{name}.tar.gz" src/',
    "gzip -k {file}",
    'rsync -av src/ "backup/{date}/"',
    "du -sh {dir}",
    "TAG={tag} ./release.sh",
    "cut -d: -f1 {file}",
    "tr -d '\\r' < {file} > clean.txt",
    "base64 -d <<< {data} > out.bin",
    "awk -F, '{{print $2}}' {file}",
    "[ -f {file} ] && echo exists",
    "test -n {x} && echo set",
    "if [ {a} = {b} ]; then echo same; fi",
    'echo "{a}" | grep -q -- "{b}" && echo yes',
    'echo {x} > "out/{name}.txt"',
    'cat "{path}" | head -n 5',
    "grep -c -- {word} notes.txt",
    # --- services
    'curl -s "https://api.github.com/repos/{repo}/releases/latest" | jq -r .tag_name',
    'curl -X POST -d "{payload}" http://localhost:8080/hook',
    'curl -fsS "https://api.example.com/users/{user_id}"',
    'wget -O "downloads/{name}.zip" "{url}"',
    "docker logs --tail 100 {container}",
    "docker exec web ls {dir}",
    "kubectl logs deploy/{service} --tail=100",
    "kubectl get pods -l app={app}",
    "systemctl status {service}",
    'journalctl -u {service} --since "{since}"',
    "ping -c 1 {host}",
    'terraform plan -var "region={region}"',
    "aws s3 ls s3://{bucket}/",
    'gh issue create --title {title} --body {body}',
    'git commit -m "{message}"',
]
MAX_EVERYDAY_REFUSED = 5

# Programs that would reach the network, another machine or the system: stubbed (exit 0).
# So are the interpreters given a literal script (the scripts do not exist here; they only
# cost start-up time).
STUBS = ("curl wget gh aws mail mailx sendmail notify-send logger wall ssh scp rsync git docker "
         "kubectl helm terraform systemctl sudo pg_dump psql mysqldump redis-cli mosquitto_pub "
         "npm npx pip gpg yq python3 node uv poetry deno cargo ping journalctl").split()

#: Value sets: in set k, the i-th placeholder gets HOSTILE[(k + i) % len(HOSTILE)].
HOSTILE = [
    "$(touch MARK)",
    "`touch MARK`",
    "'; touch MARK; '",
    '"; touch MARK; "',
    '"$(touch MARK)"',
    "\ntouch MARK\n#",
    "a[$(touch MARK)]",
    "--checkpoint-action=exec=touch MARK",
]
#: Sets where a backslash or quote that could join the next value comes first, then a
#: value that runs (one placeholder: the two glued together).
MIXED = [("x\\", ";touch MARK;#"), ("'", "$(touch MARK)"), ("\\", "\n touch MARK \n")]
# An absolute path the template would write to or read from (not /dev/null): not run here.
_ABSOLUTE = re.compile(r"(?:^|(?<=[\s'\"=<>(]))/(?!dev/(?:null|stdin|stdout|stderr)\b)")


def _refusals() -> dict[str, str]:
    return {t: p for t in CORPUS if (p := shell_problem(t)) is not None}


def _report(refused: dict[str, str]) -> str:
    lines = [f"shell corpus: {len(CORPUS)} templates, {len(CORPUS) - len(refused)} accepted, "
             f"{len(refused)} refused"]
    for template, problem in refused.items():
        lines.append(f"  REFUSED {template!r}\n      -> {problem}")
    return "\n".join(lines)


def test_the_corpus_is_large_and_has_no_duplicates() -> None:
    assert len(CORPUS) >= 85
    assert len(set(CORPUS)) == len(CORPUS)


def test_few_of_the_templates_people_write_are_refused() -> None:
    refused = _refusals()
    report = _report(refused)
    print("\n" + report)
    assert len(refused) <= MAX_REFUSED, report


def test_every_refusal_says_what_to_do_instead() -> None:
    for template, problem in _refusals().items():
        assert any(hint in problem for hint in ADVICE), (template, problem)


def test_the_first_hour_templates_are_rarely_refused() -> None:
    """HTML and ``>`` inside quotes, ``uv run script.py {x}``, ``npm run build -- {x}``,
    ``tini -s -- ./worker.sh {x}``...: at most a handful refused, each saying what to do."""
    assert len(EVERYDAY) == 80 and len(set(EVERYDAY)) == 80
    refused = {t: p for t in EVERYDAY if (p := shell_problem(t)) is not None}
    report = _report(refused).replace(f"{len(CORPUS)} templates, {len(CORPUS) - len(refused)}",
                                      f"{len(EVERYDAY)} templates, "
                                      f"{len(EVERYDAY) - len(refused)}")
    print("\nfirst hour " + report)
    assert len(refused) <= MAX_EVERYDAY_REFUSED, report
    for template, problem in refused.items():
        assert any(hint in problem for hint in ADVICE), (template, problem)


# --- the accepted templates, run with hostile values --------------------------------------

def _runnable(template: str) -> bool:
    return shell_problem(template) is None and not _ABSOLUTE.search(template)


def _value_sets(count: int) -> list[list[str]]:
    """Per run, the values of the template's placeholders, in order."""
    sets = [[HOSTILE[(k + i) % len(HOSTILE)] for i in range(count)] for k in range(len(HOSTILE))]
    for first, rest in MIXED:
        sets.append([first] + [rest] * (count - 1) if count > 1 else [first + rest])
    return sets


def _setup(where: Path) -> None:
    for rel, text in {"report.txt": "all good\n", "data/a.txt": "a\n", "dist/app.js": "1\n",
                      "app.log": "ok\n", "metrics.csv": "a,b,3\n", "config.json": "{}\n",
                      "package.json": '{"version": "0.0.0"}\n', "input.txt": "one\n",
                      "hosts.txt": "web1\n", "inventory.txt": "web1\n", "access.log": "GET /\n",
                      "data.csv": "a,b\n", "reports/x.csv": "a\n", "backup.tgz": "x\n"}.items():
        path = where / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def _stub_dir(tmp_path: Path) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in STUBS:
        stub = bin_dir / name
        stub.write_text("#!/bin/sh\nexit 0\n")
        stub.chmod(0o755)
    return bin_dir


def _run_template(index: int, template: str, tmp_path: Path, bin_dir: Path,
                  marks: Path) -> list[tuple[str, str, list[str]]]:
    """Run one accepted template with every value set in both shells; the runs that
    created their marker, as (shell, rendered command, values)."""
    where = tmp_path / f"t{index}"
    where.mkdir()
    _setup(where)
    env = dict(os.environ)
    env.update({"HOME": str(where), "TMPDIR": str(where),
                "PATH": f"{bin_dir}{os.pathsep}{env.get('PATH', '')}",
                "GITHUB_OUTPUT": str(where / "gh_output"),
                "GITHUB_STEP_SUMMARY": str(where / "gh_summary"),
                "SLACK_WEBHOOK_URL": "https://hooks.example.com/x", "GITHUB_TOKEN": "t",
                "MAILGUN_KEY": "k", "WEBHOOK_SECRET": "s",
                "DATABASE_URL": "postgres://nobody@127.0.0.1:1/none"})
    count = len(dict.fromkeys(refs(template)))
    hits = []
    for set_no, values in enumerate(_value_sets(count)):
        for shell, argv in SHELLS.items():
            marker = marks / f"M{index}-{set_no}-{shell.replace(' ', '')}"
            filled = [v.replace("MARK", str(marker)) for v in values]
            order: dict[Ref, str] = {}

            def lookup(ref: Ref, filled: list[str] = filled, order: dict[Ref, str] = order) -> str:
                if ref not in order:
                    order[ref] = filled[min(len(order), len(filled) - 1)]
                return order[ref]

            command = render_command(template, lookup)
            try:
                subprocess.run([*argv, command], cwd=where, env=env, stdin=subprocess.DEVNULL,
                               capture_output=True, timeout=10)
            except subprocess.TimeoutExpired:
                pass
            if marker.exists():
                hits.append((shell, command, filled))
    return hits


@pytest.mark.skipif(not all(shutil.which(s[0]) for s in SHELLS.values()),
                    reason="needs dash and bash")
def test_accepted_templates_keep_hostile_values_as_data(tmp_path: Path) -> None:
    bin_dir = _stub_dir(tmp_path)
    marks = tmp_path / "marks"
    marks.mkdir()
    runnable = [t for t in dict.fromkeys(CORPUS + EVERYDAY) if _runnable(t)]
    assert len(runnable) >= 140, len(runnable)
    job: Callable[[tuple[int, str]], list[tuple[str, str, list[str]]]] = \
        lambda item: _run_template(item[0], item[1], tmp_path, bin_dir, marks)  # noqa: E731
    with ThreadPoolExecutor(max_workers=min(16, (os.cpu_count() or 2) * 2)) as pool:
        results = list(pool.map(job, enumerate(runnable)))
    hits = [hit for result in results for hit in result]
    assert not hits, "\n".join(f"{shell}: {command!r} ran a value ({values!r})"
                               for shell, command, values in hits)
    assert not list(marks.iterdir())


@pytest.mark.skipif(not all(shutil.which(s[0]) for s in SHELLS.values()),
                    reason="needs dash and bash")
def test_the_harness_sees_a_value_that_runs(tmp_path: Path) -> None:
    """A control: with the check skipped, ``eval {x}`` creates the marker in this setup."""
    marker = tmp_path / "MARK"
    for argv in SHELLS.values():
        command = render("eval {x}", lambda ref: f"touch {marker}", shell_quote=True)
        subprocess.run([*argv, command], cwd=tmp_path, stdin=subprocess.DEVNULL, timeout=10,
                       capture_output=True)
        assert marker.exists()
        marker.unlink()
