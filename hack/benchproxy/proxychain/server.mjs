// The proxy-chain reference of `make bench-gateway` (hack/benchproxy): Apify's
// proxy-chain Server, as a crawler framework runs it to rotate upstream
// proxies, here with one upstream. It checks the client's Basic credentials
// and chains every request and tunnel to BENCH_UPSTREAM (a URL with the
// upstream's credentials). It prints "listening" once it accepts connections
// and stops on SIGTERM.
import { Server } from 'proxy-chain';

const listen = process.env.BENCH_LISTEN; // host:port
const upstream = process.env.BENCH_UPSTREAM;
const user = process.env.BENCH_USER;
const pass = process.env.BENCH_PASS;
if (!listen || !upstream || !user || !pass) {
  console.error('BENCH_LISTEN, BENCH_UPSTREAM, BENCH_USER and BENCH_PASS are required');
  process.exit(2);
}
const sep = listen.lastIndexOf(':');

const server = new Server({
  host: listen.slice(0, sep),
  port: Number(listen.slice(sep + 1)),
  verbose: false,
  prepareRequestFunction: ({ username, password }) => {
    if (username !== user || password !== pass) {
      return { requestAuthentication: true, failMsg: 'bad credentials' };
    }
    return { upstreamProxyUrl: upstream };
  },
});

await server.listen();
console.log('listening');
process.on('SIGTERM', () => {
  server.close(true).then(() => process.exit(0));
});
