// Drives Chromium over the DevTools protocol (--remote-debugging-pipe: no
// port, no npm package) for tests/html.rs: opens a page, runs steps, prints
// one JSON object {results, console, exceptions} on stdout.
//
//   node cdp.js CHROMIUM URL < steps.json
//
// A step is {"eval": EXPR} (its value), {"click": CSS, "at": [fx, fy]} (a
// real mouse click at that fraction of the element's box, default its
// centre), {"hover": CSS, "at": [...]}, {"type": [CSS, TEXT]} (focus, then
// the text as typed), {"select": [CSS, VALUE]} (a <select>'s value, with its
// change event) or {"screenshot": PATH}. Each gives one result.
'use strict';
const { spawn } = require('child_process');
const fs = require('fs');

const [chromium, url] = process.argv.slice(2);
const steps = JSON.parse(fs.readFileSync(0, 'utf8'));
const browser = spawn(chromium, ['--headless', '--no-sandbox', '--disable-gpu', '--hide-scrollbars',
  '--remote-debugging-pipe', '--no-first-run', '--user-data-dir=' + fs.mkdtempSync('/tmp/mtlab-cdp-'), 'about:blank'],
  { stdio: ['ignore', 'ignore', 'pipe', 'pipe', 'pipe'] });
const toChrome = browser.stdio[3], fromChrome = browser.stdio[4];
let nextId = 1, pending = new Map(), buffered = '', listeners = [];
const consoleLines = [], exceptions = [];
let stderr = '';
browser.stderr.on('data', d => { stderr += d; });

fromChrome.on('data', chunk => {
  buffered += chunk.toString('utf8');
  let at;
  while ((at = buffered.indexOf('\0')) >= 0) {
    const msg = JSON.parse(buffered.slice(0, at));
    buffered = buffered.slice(at + 1);
    if (msg.id && pending.has(msg.id)) {
      const { resolve, reject } = pending.get(msg.id);
      pending.delete(msg.id);
      msg.error ? reject(new Error(JSON.stringify(msg.error))) : resolve(msg.result);
    } else if (msg.method) {
      if (msg.method === 'Runtime.consoleAPICalled') {
        consoleLines.push(msg.params.type + ': ' + msg.params.args.map(a => a.value !== undefined ? String(a.value) : a.description).join(' '));
      } else if (msg.method === 'Runtime.exceptionThrown') {
        const d = msg.params.exceptionDetails;
        exceptions.push((d.exception && d.exception.description) || d.text);
      }
      listeners.forEach(l => l(msg));
    }
  }
});

function send(method, params, sessionId) {
  const id = nextId++;
  const msg = { id, method, params: params || {} };
  if (sessionId) msg.sessionId = sessionId;
  toChrome.write(JSON.stringify(msg) + '\0');
  return new Promise((resolve, reject) => pending.set(id, { resolve, reject }));
}

function event(name) {
  return new Promise(resolve => {
    const l = msg => { if (msg.method === name) { listeners = listeners.filter(x => x !== l); resolve(msg.params); } };
    listeners.push(l);
  });
}

async function main() {
  const { targetId } = await send('Target.createTarget', { url: 'about:blank' });
  const { sessionId } = await send('Target.attachToTarget', { targetId, flatten: true });
  const s = (m, p) => send(m, p, sessionId);
  await s('Page.enable');
  await s('Runtime.enable');
  await s('Emulation.setDeviceMetricsOverride', { width: 1280, height: 900, deviceScaleFactor: 1, mobile: false });
  const loaded = event('Page.loadEventFired');
  await s('Page.navigate', { url });
  await loaded;
  const evaluate = async expr => {
    const r = await s('Runtime.evaluate', { expression: expr, returnByValue: true, awaitPromise: true });
    if (r.exceptionDetails) throw new Error('evaluating ' + expr + ': ' + JSON.stringify(r.exceptionDetails));
    return r.result.value;
  };
  const pointAt = async (css, at) => {
    const [fx, fy] = at || [0.5, 0.5];
    const box = await evaluate(`(function(){var e=document.querySelector(${JSON.stringify(css)});if(!e)return null;
      e.scrollIntoView({block:'center'});var r=e.getBoundingClientRect();return [r.left+r.width*${fx},r.top+r.height*${fy}]})()`);
    if (!box) throw new Error('no element ' + css);
    return { x: box[0], y: box[1] };
  };
  const results = [];
  for (const step of steps) {
    if (step.eval !== undefined) {
      results.push(await evaluate(step.eval));
    } else if (step.click !== undefined || step.hover !== undefined) {
      const p = await pointAt(step.click !== undefined ? step.click : step.hover, step.at);
      await s('Input.dispatchMouseEvent', { type: 'mouseMoved', x: p.x, y: p.y });
      if (step.click !== undefined) {
        await s('Input.dispatchMouseEvent', { type: 'mousePressed', x: p.x, y: p.y, button: 'left', clickCount: 1 });
        await s('Input.dispatchMouseEvent', { type: 'mouseReleased', x: p.x, y: p.y, button: 'left', clickCount: 1 });
      }
      results.push([p.x, p.y]);
    } else if (step.type !== undefined) {
      await evaluate(`document.querySelector(${JSON.stringify(step.type[0])}).focus()`);
      await s('Input.insertText', { text: step.type[1] });
      results.push(true);
    } else if (step.select !== undefined) {
      results.push(await evaluate(`(function(){var e=document.querySelector(${JSON.stringify(step.select[0])});
        e.value=${JSON.stringify(step.select[1])};e.dispatchEvent(new Event('change'));return e.value})()`));
    } else if (step.screenshot !== undefined) {
      const shot = await s('Page.captureScreenshot', { format: 'png', captureBeyondViewport: false });
      fs.writeFileSync(step.screenshot, Buffer.from(shot.data, 'base64'));
      results.push(step.screenshot);
    } else {
      throw new Error('unknown step ' + JSON.stringify(step));
    }
  }
  return results;
}

const timer = setTimeout(() => { console.error('timed out; chromium said: ' + stderr); process.exit(3); }, 60000);
main().then(results => {
  process.stdout.write(JSON.stringify({ results, console: consoleLines, exceptions }) + '\n');
  clearTimeout(timer);
  browser.kill();
  process.exit(0);
}, e => {
  console.error(e.stack + '\nchromium said: ' + stderr);
  browser.kill();
  process.exit(2);
});
