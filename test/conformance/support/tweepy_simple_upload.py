"""tweepy's simple upload (Debian python3-tweepy): API.simple_upload POSTs
the whole file as the multipart `media` part to the upload host's
/1.1/media/upload.json, with no `command`. Only the hosts are changed
(tweepy's own `host` / `upload_host` settings); requests verifies the test
server's certificate through REQUESTS_CA_BUNDLE.

argv[1]: JSON with host, consumer key and secret, access token and secret,
the file and an optional media_category. Prints one JSON line: the Media
object's fields, or the error tweepy raised with its api_codes.
"""
import json
import sys

import tweepy


def main():
    args = json.loads(sys.argv[1])
    auth = tweepy.OAuth1UserHandler(args["consumer_key"], args["consumer_secret"], args["token"], args["token_secret"])
    api = tweepy.API(auth, host=args["host"], upload_host=args["host"])
    try:
        media = api.simple_upload(args["file"], media_category=args.get("media_category"))
    except tweepy.errors.HTTPException as err:
        print(json.dumps({"tweepy": tweepy.__version__, "status": err.response.status_code, "api_codes": err.api_codes, "api_messages": err.api_messages}))
        return
    # media_id is the exact int Python parsed, printed as text (a JSON number would lose digits in the test).
    print(json.dumps({"tweepy": tweepy.__version__, "media_id": str(media.media_id), "media_id_string": media.media_id_string, "media_key": getattr(media, "media_key", None), "size": media.size, "image": getattr(media, "image", None)}))


main()
