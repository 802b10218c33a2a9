"""An OAuth 2.0 web client on Debian's oauthlib and requests-oauthlib, as an
application builds one: oauthlib's WebApplicationClient makes the PKCE pair
(create_code_verifier(128): secrets.token_urlsafe(128), 171 characters),
requests-oauthlib's OAuth2Session builds the authorization URL, exchanges the
code and calls the API with the token.

Driven by test/conformance/oauthlib-pkce.test.ts over stdin/stdout, one JSON
object a line: argv[1] holds the endpoints and client; the script prints the
authorization URL, reads the callback URL the consent redirected to, prints
the token answer and the API call's status. The verifier never leaves it.
"""
import json
import os
import sys

# The test server is plain HTTP on loopback.
os.environ["OAUTHLIB_INSECURE_TRANSPORT"] = "1"

import oauthlib  # noqa: E402
import requests_oauthlib  # noqa: E402
from oauthlib.oauth2 import WebApplicationClient  # noqa: E402
from requests_oauthlib import OAuth2Session  # noqa: E402


def main():
    args = json.loads(sys.argv[1])
    client = WebApplicationClient(args["client_id"])
    verifier = client.create_code_verifier(args.get("verifier_length", 128))
    challenge = client.create_code_challenge(verifier, "S256")
    session = OAuth2Session(client=client, redirect_uri=args["redirect_uri"], scope=args["scope"].split(" "))
    url, _state = session.authorization_url(args["authorize"], code_challenge=challenge, code_challenge_method="S256")
    print(json.dumps({"url": url, "verifier_length": len(verifier), "oauthlib": oauthlib.__version__, "requests_oauthlib": requests_oauthlib.__version__}), flush=True)

    callback = sys.stdin.readline().strip()
    try:
        token = session.fetch_token(args["token"], authorization_response=callback, code_verifier=verifier, client_secret=args["client_secret"])
    except Exception as err:  # the refusal is the answer the test reads
        print(json.dumps({"error": type(err).__name__, "description": str(err)}), flush=True)
        return
    answer = session.get(args["api"])
    print(json.dumps({"token_type": token.get("token_type"), "scope": token.get("scope"), "api_status": answer.status_code}), flush=True)


main()
