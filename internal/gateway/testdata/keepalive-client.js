'use strict';
// A crawler's Node.js client, as TestNodeKeepAliveAgent runs it: for each
// session, an http.Agent with keepAlive (what Node's global agent is from
// Node 19 on) and one socket to the proxy, a plain GET and then a CONNECT
// that the agent sends on the same socket. Only Node's own http module.
//
// Arguments: proxy host, proxy port, Proxy-Authorization value, the plain
// URL, the CONNECT target (host:port, an echo server that first writes a
// line), the session header's name, then the session ids. It prints one
// JSON line per session and exits 0, or prints why on stderr and exits 1.
const http = require('http');

const [host, port, auth, plainURL, target, sessionHeader, ...sessions] = process.argv.slice(2);

function get(agent, headers) {
  return new Promise((resolve, reject) => {
    const req = http.request({ host, port, path: plainURL, agent, headers }, (res) => {
      // Read now: at the end the socket goes back to the agent.
      const localPort = res.socket.localPort;
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (d) => { body += d; });
      res.on('end', () => resolve({ status: res.statusCode, body, port: localPort }));
    });
    req.on('error', reject);
    req.end();
  });
}

function connect(agent, headers) {
  return new Promise((resolve, reject) => {
    const req = http.request({ host, port, method: 'CONNECT', path: target, agent, headers });
    req.on('connect', (res, socket, head) => {
      const out = { status: res.statusCode, port: socket.localPort, line: '', echo: '' };
      if (res.statusCode !== 200) {
        socket.destroy();
        resolve(out);
        return;
      }
      let buf = head.toString('utf8');
      let sent = false;
      const step = () => {
        if (!sent) {
          const nl = buf.indexOf('\n');
          if (nl < 0) return;
          out.line = buf.slice(0, nl).trim();
          buf = buf.slice(nl + 1);
          sent = true;
          socket.write('ping');
        }
        if (buf.length >= 4) {
          out.echo = buf.slice(0, 4);
          socket.destroy();
          resolve(out);
        }
      };
      socket.on('data', (d) => { buf += d.toString('utf8'); step(); });
      socket.on('error', reject);
      step();
    });
    req.on('error', reject);
    req.end();
  });
}

(async () => {
  for (const session of sessions) {
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
    const headers = { 'Proxy-Authorization': auth, [sessionHeader]: session };
    const plain = await get(agent, headers);
    const tunnel = await connect(agent, headers);
    agent.destroy();
    console.log(JSON.stringify({ session, plain, tunnel }));
  }
})().catch((err) => {
  console.error(String(err && err.stack || err));
  process.exit(1);
});
