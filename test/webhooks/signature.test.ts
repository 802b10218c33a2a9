import { createHmac } from 'node:crypto'
import t from 'tap'
import { crcResponseToken, webhookSignature } from '../../services/webhooks/signature'

t.test('the signature vectors of platform-facts §4', async (t) => {
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
