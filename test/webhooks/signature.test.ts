import { createHmac } from 'node:crypto'
import t from 'tap'
import { crcResponseToken, newStandardSecret, standardHeaders, standardSignature, webhookSignature } from '../../services/webhooks/signature'

t.test('the signature vectors of docs/webhooks.md', async (t) => {
  t.equal(webhookSignature('test', 'test=1&other_test=2'), 'sha256=25Cu3iwbbiqBTwQRzcKJZwisjf736V2Q8UaTlkfLSoc=')
  t.equal(webhookSignature('test', '{"test_number":1,"test_string":"two"}'), 'sha256=YWHphPn/JFq43jkF0y4/w8R/SelmLjvpunhVFY8JhlI=')
  t.equal(webhookSignature('test', Buffer.from('{"test_number":1,"test_string":"two"}')), 'sha256=YWHphPn/JFq43jkF0y4/w8R/SelmLjvpunhVFY8JhlI=', 'bytes and text agree')
  t.not(webhookSignature('test', '{"test_number":1, "test_string":"two"}'), 'sha256=YWHphPn/JFq43jkF0y4/w8R/SelmLjvpunhVFY8JhlI=', 'one byte more changes it')
  t.not(webhookSignature('tesT', 'test=1&other_test=2'), 'sha256=25Cu3iwbbiqBTwQRzcKJZwisjf736V2Q8UaTlkfLSoc=', 'another secret changes it')
})

t.test('the CRC response token is HMAC-SHA256(consumer secret, crc_token) in base64', async (t) => {
  const token = 'challenge_string'
  const expected = `sha256=${createHmac('sha256', 'consumer-secret').update(token).digest('base64')}`
  t.equal(crcResponseToken('consumer-secret', token), expected)
  // Non-ASCII secrets and tokens are UTF-8 encoded, as the platform's samples do.
  t.equal(crcResponseToken('sécret', 'tökén'), `sha256=${createHmac('sha256', Buffer.from('sécret', 'utf8')).update(Buffer.from('tökén', 'utf8')).digest('base64')}`)
})

t.test('Standard Webhooks: the specification\'s example, several secrets, fresh secrets', async (t) => {
  // The example message of the Standard Webhooks specification and its expected signature.
  const secret = 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw'
  t.equal(standardSignature(secret, 'msg_p5jXN8AQM9LWM0D4loKWxJek', 1614265330, '{"test": 2432232314}'), 'v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=')
  const other = newStandardSecret()
  const headers = standardHeaders([secret, other], 'msg_p5jXN8AQM9LWM0D4loKWxJek', 1614265330_999, '{"test": 2432232314}')
  t.same(headers, {
    'webhook-id': 'msg_p5jXN8AQM9LWM0D4loKWxJek',
    'webhook-timestamp': '1614265330',
    'webhook-signature': `v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE= ${standardSignature(other, 'msg_p5jXN8AQM9LWM0D4loKWxJek', 1614265330, '{"test": 2432232314}')}`
  }, 'seconds, and one space-separated entry per secret, the current first')
  t.match(other, /^whsec_[A-Za-z0-9+/]{43}=$/)
  t.not(newStandardSecret(), other, 'each secret is new')
})
